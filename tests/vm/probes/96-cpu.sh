#!/bin/bash
# Probe, not a CI scenario (issue 21): where the guest's CPU goes in one round of
# 60 jobs, per command (/proc/*/stat before and after): bare systemd-run lanes,
# xlurm as it is, VM 11's isolated lanes, and xlurm with every job on node 0
# (xlurmd --reserve-cpus 1). It found the cpuset memory-migration ping-pong (see
# the session-10 note on issue 21). Run it with:
#   XLURM_VM_SCENARIO_DIR=tests/vm/probes tests/vm/run 96-cpu
# timeout: 600
set -euo pipefail
. "$XLURM_VM_LIB"
systemctl start xlurmd

n=60
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
dbus_pid=$(systemctl show -p MainPID --value dbus.service)
xlurmd_pid=$(systemctl show -p MainPID --value xlurmd.service)
cpu0=()
cpu_start() { cpu0=("$(ticks 1)" "$(ticks "$dbus_pid")" "$(ticks "$xlurmd_pid")" "$(busy)"); }
cpu_note() {
    note "$1 CPU ticks: systemd $(( $(ticks 1) - cpu0[0] )), dbus-daemon $(( $(ticks "$dbus_pid") - cpu0[1] )), xlurmd $(( $(ticks "$xlurmd_pid") - cpu0[2] )), whole guest $(( $(busy) - cpu0[3] )) (of 2 CPUs)"
}
lane() { for i in $(seq $((n / 2))); do systemd-run --wait -q -p User=alice "$@" /bin/true; done; }
# The same with the isolation an xlurm job's unit has (cpuset, memory budget,
# device cgroup program, journal fields): what systemd itself spends on it.
iso() {
    lane -p Slice=xlurm.slice -p Type=exec -p AllowedCPUs="$1" -p AllowedMemoryNodes=0 \
        -p MemoryMax=256M -p MemorySwapMax=0 -p DevicePolicy=closed -p NoNewPrivileges=yes \
        -p KillMode=control-group -p RuntimeMaxSec=3600 -p LogExtraFields=XLURM_JOB_ID=0 \
        -p StandardInput=null -p WorkingDirectory=/home/alice
}
args=()
for i in $(seq $n); do args+=(2 argv as 1 /bin/true cwd s /home/alice); done
# xlurm's side: one listener counts the jobs' final states and one awk waits
# on its output (a polling loop would load the 2 CPUs it measures: every
# process spawned under emulation costs a few hundred ms of CPU).
fifo=/tmp/xlurm-11-monitor.fifo
xlurm_round() {
    rm -f "$fifo"; mkfifo "$fifo"
    dbus-monitor --system "type='signal',sender='org.xlurm.Scheduler1',member='JobStateChanged'" >"$fifo" 2>/dev/null &
    monpid=$!
    exec 3<"$fifo"
    sleep 1
    cpu_start
    t0=$(date +%s%N)
    as_user alice busctl call org.xlurm.Scheduler1 /org/xlurm/Scheduler1 org.xlurm.Scheduler1 SubmitMany 'aa{sv}' $n "${args[@]}" >/dev/null
    # (mawk, the image's awk, waits to fill its buffer unless told -W interactive.)
    timeout 240 awk -W interactive -v n="$n" '/"COMPLETED"/ { if (++c >= n) exit } END { exit c < n }' <&3 ||
        fail "not all $n jobs COMPLETED within 240 s"
    t_done=$(date +%s%N)
    # Until systemd has let go of every unit, as the bare lanes' units are
    # gone when their systemd-run returns: the batched collects count too.
    until [ "$(systemctl list-units --all --no-legend 'xlurm-job-*' | wc -l)" -eq 0 ]; do
        [ $(( ($(date +%s%N) - t_done) / 1000000000 )) -lt 60 ] || fail "job units left 60 s after the last job ended"
        sleep 0.1
    done
    t1=$(date +%s%N)
    cpu_note "xlurm ($cfg):"
    note "xlurm ($cfg): last job COMPLETED after $(ms "$t0" "$t_done") ms, every unit collected after $(ms "$t0" "$t1") ms"
    kill "$monpid" 2>/dev/null || true
    exec 3<&-
    rm -f "$fifo"
    assert_eq 0 "$(as_user alice xqueue --mine | awk 'NR>1' | wc -l)" "jobs left in the queue"
}
# The lanes take turns going first: systemd's cost of isolated units grows over
# a boot (seen in CI: the isolated lanes of later rounds 20-30% slower), and
# the lane that always ran last would carry that alone.
bare_round() {
    cpu_start
    t0=$(date +%s%N)
    lane & l1=$!; lane & l2=$!
    wait "$l1" "$l2"
    t1=$(date +%s%N)
    bare_ms=$(ms "$t0" "$t1")
    cpu_note "bare:"
}

# CPU ticks of every process (utime+stime, and children's for exited ones), by command.
snap() {
    awk 'FNR == 1 { c = $2; for (i = 3; i <= NF && c !~ /\)$/; i++) c = c " " $i;
                    t[c] += $(i+11) + $(i+12) + $(i+13) + $(i+14) }
         END { for (k in t) print k "\t" t[k] }' /proc/[0-9]*/stat 2>/dev/null | LC_ALL=C sort -t $'\t' -k1,1
}
delta() { # before after
    LC_ALL=C join -t $'\t' -a 2 -e 0 -o 0,1.2,2.2 "$1" "$2" | awk -F'\t' '{ d = $3 - $2; if (d > 5) print d "\t" $1 }' | sort -rn | head -25
}
check "where the guest's CPU goes: per command, one bare round and one xlurm round"
snap > /tmp/s0; bare_round; snap > /tmp/s1
note "bare: $n units in $bare_ms ms; per command (ticks):"
delta /tmp/s0 /tmp/s1 | while read -r l; do note "  $l"; done
cfg=default
snap > /tmp/s2; xlurm_round; snap > /tmp/s3
note "xlurm: per command (ticks):"
delta /tmp/s2 /tmp/s3 | while read -r l; do note "  $l"; done
note "kernel: $(awk '/^cpu /{print "user",$2,"nice",$3,"system",$4,"irq",$7,"softirq",$8}' /proc/stat)"
iso_round() {
    cpu_start
    t0=$(date +%s%N)
    iso 0 & l1=$!; iso 1 & l2=$!
    wait "$l1" "$l2"
    t1=$(date +%s%N)
    iso_ms=$(ms "$t0" "$t1")
    cpu_note "isolated:"
}
snap > /tmp/s4; iso_round; snap > /tmp/s5
note "isolated lanes (AllowedCPUs=0|1, AllowedMemoryNodes=0, xlurm.slice...): $n units in $iso_ms ms; per command (ticks):"
delta /tmp/s4 /tmp/s5 | while read -r l; do note "  $l"; done
note "xlurm.slice cpuset: cpus $(cat /sys/fs/cgroup/xlurm.slice/cpuset.cpus 2>/dev/null) mems $(cat /sys/fs/cgroup/xlurm.slice/cpuset.mems 2>/dev/null); numa: $(cat /sys/devices/system/node/online)"
note "a job's unit (AllowedCPUs, AllowedMemoryNodes) from xlurm's last round:"
as_user alice xqueue --all --limit 2 || true
mkdir -p /run/systemd/system/xlurmd.service.d
printf '[Service]\nExecStart=\nExecStart=/usr/bin/xlurmd --reserve-cpus 1\n' > /run/systemd/system/xlurmd.service.d/96.conf
systemctl daemon-reload; systemctl restart xlurmd
xlurmd_pid=$(systemctl show -p MainPID --value xlurmd.service)
cfg="node 0 only (--reserve-cpus 1)"
snap > /tmp/s6; xlurm_round; snap > /tmp/s7
note "xlurm, every job on node 0: per command (ticks):"
delta /tmp/s6 /tmp/s7 | while read -r l; do note "  $l"; done
systemctl show -p AllowedCPUs,AllowedMemoryNodes "xlurm-job-$(( $(as_user alice xqueue --all --json | grep -o '"id": [0-9]*' | tail -1 | awk '{print $2}') ))".service 2>/dev/null || true
rm -f /run/systemd/system/xlurmd.service.d/96.conf; systemctl daemon-reload; systemctl restart xlurmd
