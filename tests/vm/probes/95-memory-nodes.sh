#!/bin/bash
# Probe (issue 21; not run by CI): what keeping a unit's memory on its NUMA node
# costs PID 1 on this systemd. AllowedMemoryNodes set at spawn, with units on
# alternating nodes, migrates PID 1's pages (shared with its forked child) at
# every start (kworker cpuset_migrate_mm); NUMAPolicy at spawn does not; setting
# AllowedMemoryNodes after exec (a fence put up once the job runs) migrates the
# new process's mapped pages, shared libraries included, and costs nearly as
# much. Run: XLURM_VM_SCENARIO_DIR=tests/vm/probes tests/vm/run 95-memory-nodes
# (the kworker's ticks are counted under whatever name it has at the end).
# timeout: 900
set -uo pipefail
. "$XLURM_VM_LIB"
snap() {
    awk 'FNR == 1 { c = $2; for (i = 3; i <= NF && c !~ /\)$/; i++) c = c " " $i;
                    t[c] += $(i+11) + $(i+12) + $(i+13) + $(i+14) }
         END { for (k in t) print k "\t" t[k] }' /proc/[0-9]*/stat 2>/dev/null | LC_ALL=C sort -t $'\t' -k1,1
}
delta() {
    LC_ALL=C join -t $'\t' -a 2 -e 0 -o 0,1.2,2.2 "$1" "$2" | awk -F'\t' '{ d = $3 - $2; if (d > 5) print d "\t" $1 }' | sort -rn | head -6
}
k=0
run() { # label, props fn, after fn
    local label=$1 props=$2 after=$3
    snap > /tmp/a; t0=$(date +%s%N)
    for i in $(seq 30); do
        k=$((k + 1))
        systemd-run -q -u "p$k" -p User=alice -p Type=exec $($props "$i") /bin/sleep 3
        $after "p$k" "$i"
    done
    sleep 4
    t1=$(date +%s%N); snap > /tmp/b
    note "$label: 30 units in $(( (t1 - t0) / 1000000 )) ms; top commands (ticks):"
    delta /tmp/a /tmp/b | while read -r l; do note "  $l"; done
}
nothing() { :; }
amn_alt() { echo "-p AllowedCPUs=$(( $1 % 2 )) -p AllowedMemoryNodes=$(( $1 % 2 ))"; }
pol_alt() { echo "-p AllowedCPUs=$(( $1 % 2 )) -p NUMAPolicy=bind -p NUMAMask=$(( $1 % 2 ))"; }
local_alt() { echo "-p AllowedCPUs=$(( $1 % 2 )) -p NUMAPolicy=local"; }
fence() { systemctl set-property --runtime "$1" AllowedMemoryNodes=$(( $2 % 2 )) || true; }
control() { systemctl set-property --runtime "$1" CPUWeight=100 || true; }
check "30 units each"
run "AllowedMemoryNodes at spawn, alternating" amn_alt nothing
run "NUMAPolicy=bind at spawn, alternating" pol_alt nothing
run "NUMAPolicy=local at spawn, alternating (xlurmd --memory-nodes=local)" local_alt nothing
run "NUMAPolicy + set-property CPUWeight (control)" pol_alt control
run "NUMAPolicy + set-property AllowedMemoryNodes (fence)" pol_alt fence
run "NUMAPolicy + set-property CPUWeight (control, again)" pol_alt control
run "NUMAPolicy + set-property AllowedMemoryNodes (fence, again)" pol_alt fence
run "AllowedMemoryNodes at spawn, alternating (again)" amn_alt nothing
check "fence takes: a process's Mems_allowed after the fence"
systemd-run -q -u fq -p User=alice -p Type=exec -p NUMAPolicy=bind -p NUMAMask=1 /bin/sleep 5
systemctl set-property --runtime fq AllowedMemoryNodes=1
note "  $(grep Mems_allowed_list /proc/$(systemctl show -p MainPID --value fq)/status)"
note "  $(systemctl show -p AllowedMemoryNodes,NUMAPolicy,NUMAMask fq | tr '\n' ' ')"
exit 0
