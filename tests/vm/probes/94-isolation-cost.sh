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
#
# Session 20 added the sets nodev (the cheap properties in xlurm-nodev.slice,
# which has DevicePolicy=closed, instead of a device program per unit) and
# nodevall (all but the device policy, there), and an interleaved part. Three
# runs (40 units a set; blocks in ms, then interleaved ms per unit):
#   run 1 (slice empty between units): bare 8373/24934, cheap 12317/30806,
#     devices 11230/33912, nodev 11517/28035, all 16432/26288, nodevall
#     13170/13752 (round 2 three times slower than round 1 at its end).
#   run 2 (the same): blocks bare 11455/14245, all 20037/12630, nodevall
#     23979/16363; interleaved bare 633, all 692, nodevall 736.
#   run 3 (a unit kept running in the slice, as below): blocks bare
#     9977/14377, all 10528/11597, nodevall 12095/12033; interleaved bare 601,
#     all 633, nodevall 599.
# So the device program costs far less in these boots than in session 19's
# (all within 5-10% of bare), and moving it to the slice is within the noise
# of a block; interleaved, it saves what is left when the slice stays
# populated (run 3) and costs more when the slice empties between units (run
# 2): systemd applies a slice's whole cgroup context again, device program
# included, each time the controllers its children need change.
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
    # The device policy on a child slice, set once, instead of on each unit.
    nodev) echo "${cheap[@]/xlurm.slice/xlurm-nodev.slice}" ;;
    nodevall) echo "${cheap[@]/xlurm.slice/xlurm-nodev.slice}" -p AllowedCPUs=@N@ \
        -p NUMAPolicy=local -p MemoryMax=256M -p MemorySwapMax=0 ;;
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
    wait $p1; wait $p2
    t1=$(date +%s%N)
    note "$(printf '%-9s %6d ms  systemd %4d  dbus %4d  guest %5d ticks' "$s" $(( (t1 - t0) / 1000000 )) \
        $(( $(ticks 1) - c0 )) $(( $(ticks "$dbus_pid") - d0 )) $(( $(busy) - b0 )))"
}
# Every set: bare cheap cpus numa memnodes memory devices all nodev nodevall.
sets=(bare all nodevall)
systemctl set-property --runtime xlurm-nodev.slice DevicePolicy=closed
systemctl start xlurm-nodev.slice
# The slice's policy binds its units: no block device, /dev/null still.
if systemd-run --wait -q -p Slice=xlurm-nodev.slice /bin/sh -c 'head -c1 /dev/vda >/dev/null'; then
    fail "a unit in xlurm-nodev.slice read /dev/vda"
fi
systemd-run --wait -q -p Slice=xlurm-nodev.slice /bin/sh -c 'echo x >/dev/null' ||
    fail "a unit in xlurm-nodev.slice could not write /dev/null"
# systemd applies a slice's whole cgroup context again, its device program
# included, whenever the controllers its children need change: each time
# xlurm-nodev.slice goes from empty to not and back. xlurm's units stay in it
# until collected; here one unit kept running there does the same.
systemd-run -q --unit=keep -p Slice=xlurm-nodev.slice -p AllowedCPUs=0 -p NUMAPolicy=local \
    -p MemoryMax=256M -p MemorySwapMax=0 sleep infinity
check "isolation cost, $n units per set, 2 lanes: ${sets[*]}"
for round in 1 2; do
    order=("${sets[@]}")
    [ "$round" = 2 ] && order=($(printf '%s\n' "${sets[@]}" | tac))
    for s in "${order[@]}"; do run_set "$s"; done
done

# Blocks of one set each meet the host's slow stretches unevenly (round 2
# above can take three times round 1). Interleaved: each lane starts one unit
# of every set in turn and times each start, so a slow stretch slows all sets
# alike. Per set: the sum of its units' start-to-exit times, in ms.
mixed=(bare all nodevall)
interleaved_lane() {
    local lane=$1 i s t0 t1 a
    for i in $(seq $((n / 2))); do
        for s in "${mixed[@]}"; do
            read -r -a a <<<"$(props "$s" | sed "s/@N@/$lane/g")"
            t0=$(date +%s%N)
            systemd-run --wait -q -p User=alice "${a[@]}" /bin/true
            t1=$(date +%s%N)
            echo "$s $(( (t1 - t0) / 1000000 ))"
        done
    done
}
check "interleaved, $n units per set, 2 lanes: ${mixed[*]}"
interleaved_lane 0 >/tmp/lane0 & p1=$!
interleaved_lane 1 >/tmp/lane1 & p2=$!
wait $p1; wait $p2
systemctl stop keep.service
for s in "${mixed[@]}"; do
    note "$(cat /tmp/lane0 /tmp/lane1 | awk -v s="$s" '$1 == s {t += $2; k++}
        END {printf "%-9s %6d ms over %d units, %.0f ms each", s, t, k, k ? t / k : 0}')"
done
