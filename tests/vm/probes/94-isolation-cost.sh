#!/bin/bash
# Probe, not a CI scenario (issue 21): what each part of a job unit's isolation
# costs systemd and the guest. Lanes as in VM 11 (2 lanes of systemd-run --wait,
# n units in all), one per set of properties: bare, the cheap properties, then
# each of the cgroup ones alone on top of them, then all of them. Two rounds in
# rotated order. Run it with:
#   XLURM_VM_SCENARIO_DIR=tests/vm/probes tests/vm/run 94-isolation-cost
#
# First run (session 19, TCG, noisy host; 40 units a set; ms, then systemd's
# CPU ticks): bare 14889/797 and 14127/757; the cheap properties 17498/942
# and 18424/976; + AllowedCPUs 18892/1035 and 19095/1036; + NUMAPolicy=local
# 16607/916 and 15911/882; + MemoryMax/MemorySwapMax 15537/802 (36208/1937 in
# a slow stretch of the boot); + DevicePolicy=closed 24257/1334 (36142 slow);
# all 29260/1631; AllowedMemoryNodes 46376/1442 (systemd 252 migrates the
# memory: not used there). So the device program is the costliest part of a
# job's isolation (about 170 ms and 100 ms of PID 1's CPU per unit under TCG),
# then the cheap properties together (Type=exec, RuntimeMaxSec, the slice...).
# timeout: 900
set -euo pipefail
. "$XLURM_VM_LIB"

n=${XLURM_PROBE_UNITS:-40}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
dbus_pid=$(systemctl show -p MainPID --value dbus.service)
lane() { for i in $(seq $((n / 2))); do systemd-run --wait -q -p User=alice "$@" /bin/true; done; }
cheap=(-p Slice=xlurm.slice -p Type=exec -p NoNewPrivileges=yes -p KillMode=control-group
    -p RuntimeMaxSec=3600 -p LogExtraFields=XLURM_JOB_ID=0 -p StandardInput=null
    -p WorkingDirectory=/home/alice)
props() {
    case $1 in
    bare) ;;
    cheap) echo "${cheap[@]}" ;;
    cpus) echo "${cheap[@]}" -p AllowedCPUs=@N@ ;;
    numa) echo "${cheap[@]}" -p NUMAPolicy=local ;;
    memnodes) echo "${cheap[@]}" -p AllowedMemoryNodes=@N@ ;;
    memory) echo "${cheap[@]}" -p MemoryMax=256M -p MemorySwapMax=0 ;;
    devices) echo "${cheap[@]}" -p DevicePolicy=closed ;;
    all) echo "${cheap[@]}" -p AllowedCPUs=@N@ -p NUMAPolicy=local -p MemoryMax=256M \
        -p MemorySwapMax=0 -p DevicePolicy=closed ;;
    esac
}
run_set() {
    local s=$1 a b t0 t1 c0 b0 d0
    read -r -a a <<<"$(props "$s" | sed s/@N@/0/g)"
    read -r -a b <<<"$(props "$s" | sed s/@N@/1/g)"
    c0=$(ticks 1); d0=$(ticks "$dbus_pid"); b0=$(busy)
    t0=$(date +%s%N)
    lane "${a[@]}" & p1=$!
    lane "${b[@]}" & p2=$!
    wait $p1 $p2
    t1=$(date +%s%N)
    note "$(printf '%-9s %6d ms  systemd %4d  dbus %4d  guest %5d ticks' "$s" $(( (t1 - t0) / 1000000 )) \
        $(( $(ticks 1) - c0 )) $(( $(ticks "$dbus_pid") - d0 )) $(( $(busy) - b0 )))"
}
sets=(bare cheap cpus numa memnodes memory devices all)
check "isolation cost, $n units per set, 2 lanes"
for round in 1 2; do
    order=("${sets[@]}")
    [ "$round" = 2 ] && order=($(printf '%s\n' "${sets[@]}" | tac))
    for s in "${order[@]}"; do run_set "$s"; done
done
