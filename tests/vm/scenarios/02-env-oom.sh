#!/bin/bash
# Allocating far past MemoryMax (no swap) ends the unit with Result=oom-kill.
# timeout: 90
set -euo pipefail
. "$XLURM_VM_LIB"

unit=xlurm-vmtest-oom.service
forget_unit "$unit"
trap 'forget_unit "$unit"' EXIT

check "a 300M allocation under MemoryMax=32M, MemorySwapMax=0"
# tail keeps the whole (newline-free) input in memory.
rc=0
systemd-run --quiet --wait --unit="$unit" -p MemoryMax=32M -p MemorySwapMax=0 -p User=bob \
    -- /bin/sh -c 'head -c 300M /dev/zero | tail >/dev/null' || rc=$?
note "systemd-run exit status: $rc"
assert_ne 0 "$rc" "job did not succeed"
assert_eq oom-kill "$(unit_prop "$unit" Result)" "unit Result"
assert_eq failed "$(unit_prop "$unit" ActiveState)" "unit ActiveState"
wait_for "journal_of $unit | grep -qi 'oom'" 20
note "journal: $(journal_of "$unit" | grep -i oom | head -n 2 | tr '\n' ' ')"
