#!/bin/bash
# A transient unit started with a raw StartTransientUnit call gets the isolation xlurm relies on:
# AllowedCPUs/AllowedMemoryNodes, MemoryMax without swap, DevicePolicy=closed, User=.
# timeout: 90
set -euo pipefail
. "$XLURM_VM_LIB"

unit=xlurm-vmtest-iso.service
outf=/tmp/xlurm-vmtest-iso.out
go=/tmp/xlurm-vmtest-iso.go
forget_unit "$unit"
rm -f "$outf" "$go"
trap 'forget_unit "$unit"; rm -f "$outf" "$go"' EXIT

# The job reports, then stays alive until the scenario touches $go (at most 60 s), so the
# live cgroup and the Effective* properties can be read while it runs.
script="{ cat /proc/self/status; id; head -c1 /dev/vda >/dev/null; echo head_rc=\$?; } >$outf.tmp 2>&1
mv $outf.tmp $outf; echo job-output-in-journal
for i in \$(seq 600); do [ -e $go ] && break; sleep 0.1; done"

check "StartTransientUnit over D-Bus (busctl)"
# alice gets the `disk` group so file permissions would let her open /dev/vda: the EPERM
# below can only come from the device cgroup (DevicePolicy=closed), not from EACCES.
# AllowedCPUs / AllowedMemoryNodes are 'ay' bitmasks: bit 1 of byte 0 = cpu/node 1 = 0x02.
busctl call -- org.freedesktop.systemd1 /org/freedesktop/systemd1 \
    org.freedesktop.systemd1.Manager StartTransientUnit 'ssa(sv)a(sa(sv))' \
    "$unit" fail 11 \
    Type s exec \
    User s alice \
    SupplementaryGroups as 1 disk \
    RemainAfterExit b true \
    AllowedCPUs ay 1 2 \
    AllowedMemoryNodes ay 1 2 \
    MemoryMax t 67108864 \
    MemorySwapMax t 0 \
    DevicePolicy s closed \
    StandardOutput s journal \
    ExecStart 'a(sasb)' 1 /bin/bash 3 /bin/bash -c "$script" false \
    0
wait_for "[ -e $outf ]" 60
assert_eq running "$(unit_prop "$unit" SubState)" "unit running"

check "what the kernel granted while it ran"
out=$(cat "$outf")
assert_contains "$out" "$(printf 'Cpus_allowed_list:\t1')" "pinned to cpu 1"
assert_contains "$out" "$(printf 'Mems_allowed_list:\t1')" "memory node 1 only"
assert_contains "$out" "uid=1001(alice)" "ran as alice"
assert_contains "$out" "head: cannot open '/dev/vda' for reading: Operation not permitted" "block device denied"
assert_contains "$out" "head_rc=1" "open of /dev/vda failed"
assert_eq 1 "$(unit_prop "$unit" EffectiveCPUs)" "EffectiveCPUs"
assert_eq 1 "$(unit_prop "$unit" EffectiveMemoryNodes)" "EffectiveMemoryNodes"

check "control: without DevicePolicy, alice (group disk) can open /dev/vda"
assert_ok systemd-run --quiet --wait --collect -p User=alice -p SupplementaryGroups=disk \
    /bin/sh -c 'head -c1 /dev/vda >/dev/null'

check "cgroup limits written"
cg=/sys/fs/cgroup/system.slice/$unit
assert_eq 67108864 "$(cat "$cg/memory.max")" "memory.max"
assert_eq 0 "$(cat "$cg/memory.swap.max")" "memory.swap.max"
assert_eq 1 "$(cat "$cg/cpuset.cpus")" "cpuset.cpus"
assert_eq 1 "$(cat "$cg/cpuset.mems")" "cpuset.mems"
assert_eq 1 "$(cat "$cg/cpuset.cpus.effective")" "cpuset.cpus.effective"

check "job ends; RemainAfterExit keeps the result"
touch "$go"
wait_unit_state "$unit" "exited dead failed" 60
assert_eq exited "$(unit_prop "$unit" SubState)" "unit finished and remains (RemainAfterExit)"
assert_eq success "$(unit_prop "$unit" Result)" "unit result"
assert_eq 0 "$(unit_prop "$unit" ExecMainStatus)" "ExecMainStatus"

check "stdout reached the journal"
wait_for "journal_of $unit | grep -q job-output-in-journal" 20
note "ok: journalctl -u $unit shows the job's output"

check "root may use busctl; alice may not start units"
if as_user alice busctl call -- org.freedesktop.systemd1 /org/freedesktop/systemd1 \
    org.freedesktop.systemd1.Manager StartTransientUnit 'ssa(sv)a(sa(sv))' \
    xlurm-vmtest-alice.service fail 1 ExecStart 'a(sasb)' 1 /bin/true 1 /bin/true false 0 2>/tmp/alice.err; then
    forget_unit xlurm-vmtest-alice.service
    fail "alice could start a system unit"
fi
note "alice refused: $(cat /tmp/alice.err)"
