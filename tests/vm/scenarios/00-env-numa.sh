#!/bin/bash
# The VM looks like the machines xlurm targets: 2 NUMA nodes, cgroup v2 with cpuset+memory.
# timeout: 60
set -euo pipefail
. "$XLURM_VM_LIB"

check "two NUMA nodes, node0=cpu0, node1=cpu1"
[ -d /sys/devices/system/node/node0 ] || fail "no node0"
[ -d /sys/devices/system/node/node1 ] || fail "no node1"
assert_eq 0 "$(cat /sys/devices/system/node/node0/cpulist)" "node0 cpulist"
assert_eq 1 "$(cat /sys/devices/system/node/node1/cpulist)" "node1 cpulist"
assert_eq 0-1 "$(cat /sys/devices/system/node/online)" "online nodes"

check "cgroup v2 (unified) with cpuset and memory"
assert_eq cgroup2fs "$(stat -f -c %T /sys/fs/cgroup)" "/sys/fs/cgroup filesystem"
controllers=$(cat /sys/fs/cgroup/cgroup.controllers)
note "controllers: $controllers"
for c in cpuset memory cpu pids; do
    assert_contains " $controllers " " $c " "controller $c"
done
