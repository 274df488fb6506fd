#!/bin/bash
# Probe, not a CI scenario (issue 21): does xrun's submit-to-running pay for
# xlurm-nodev.slice emptying between jobs? When the last unit leaves a slice,
# systemd turns off the controllers its children needed and, when the next
# one comes, applies the slice's whole cgroup context again (its device
# program included). A child slice that needs the same controllers keeps
# them on. VM 11's latency part (5 runs of systemd-run and xrun each,
# medians), without such a slice, with it, and without it again. Run it with:
#   XLURM_VM_SCENARIO_DIR=tests/vm/probes tests/vm/run 98-slice-keeper
#
# Session 22 (TCG; 4 rounds of 7 runs each way): the keeper holds the
# controllers on (subtree_control "cpuset memory pids" with it, empty
# without), but xrun's ratio to systemd-run was 1.07x, 1.02x, 1.01x and 1.09x
# without it and 1.06x, 1.03x, 0.99x and 1.08x with it: no difference beyond
# the noise, so xlurmd keeps no such slice.
# timeout: 600
set -euo pipefail
. "$XLURM_VM_LIB"
systemctl start xlurmd
latency() {
    latency_runs 7
    local b m
    b=$(printf '%s\n' "${LAT_BARE[@]}" | median); m=$(printf '%s\n' "${LAT_XRUN[@]}" | median)
    note "$1: systemd-run ${b} ms, xrun ${m} ms (${LAT_XRUN[*]}): $(awk "BEGIN {printf \"%.2f\", $m / $b}")x"
}
cpus=$(( $(nproc) - 1 ))
mkdir -p /run/systemd/system
cat >/run/systemd/system/xlurm-nodev-keep.slice <<UNIT
[Slice]
AllowedCPUs=0-$cpus
MemoryAccounting=yes
TasksAccounting=yes
UNIT
systemctl daemon-reload
for round in 1 2 3 4; do
    check "round $round"
    latency "without a keeper"
    systemctl start xlurm-nodev-keep.slice
    note "keeper: $(systemctl show -p ActiveState,ControlGroup xlurm-nodev-keep.slice | tr '\n' ' ')"
    note "xlurm-nodev.slice subtree_control: $(cat /sys/fs/cgroup/xlurm.slice/xlurm-nodev.slice/cgroup.subtree_control 2>&1)"
    latency "with a keeper"
    systemctl stop xlurm-nodev-keep.slice
    sleep 1
    note "xlurm-nodev.slice subtree_control: $(cat /sys/fs/cgroup/xlurm.slice/xlurm-nodev.slice/cgroup.subtree_control 2>&1)"
done
