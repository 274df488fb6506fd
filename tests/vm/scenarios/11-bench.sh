#!/bin/bash
# Benchmark figures on real systemd: submit-to-running latency of xrun vs a bare
# `systemd-run`, sustained job starts through SubmitMany vs bare transient units
# at the same concurrency (and systemd's CPU for them). (xlurm log -f of a
# chatty job is timed in 24-big-log.) The ratios have goals (issue 21); a ratio that
# misses its goal by more than the spread measured between runs of this
# scenario (TCG, 2-core host: see the tolerances below) fails it.
# timeout: 300
set -euo pipefail
. "$XLURM_VM_LIB"
systemctl start xlurmd

# The spread between runs, measured over 5 runs of this scenario on the 2-core
# CI machine under TCG (bb91506 and the next commit): start rate 0.86-1.00x bare,
# systemd's CPU 0.78-0.93x isolated, xrun 1.17-1.30x systemd-run. Five runs since xlurmd
# frees an ended job's place before reading its accounting and collects units in batches
# of at most 8 (13c5bcd): start rate 0.89-1.01x bare (mean 0.96), 1.12-1.23x isolated,
# systemd's CPU 0.74-0.81x isolated, xrun 1.11-1.30x. A clean-clone CI run of the
# same daemon (2368bed, a noisy host) measured 0.77x bare but 0.98x isolated: its
# isolated lanes ran at 0.75x bare (0.83x in the runs before), so the units' isolation
# cost systemd more, not xlurm. The start rate's spread on unchanged code is thus
# 0.77-1.01x. The tolerances keep the larger spreads measured.
#
# Session 20 (xlurm-nodev.slice, each connection's uid asked once, no journal
# read before a job's unit started, xrun's one look per wake), three runs in
# one session: start rate 1.10x, 1.15x and 0.90x bare (the isolated lanes
# here run in xlurm-nodev.slice too, as xlurm's units do); systemd's CPU 0.71x,
# 0.93x and 0.89x isolated; xrun 1.24x (before the last three changes),
# 1.16x and 1.19x systemd-run, then 1.31x. xrun's spread since bb91506:
# 1.11-1.31x, so its check fails a run past 1.39x: a guard against a
# regression, not a proof that every run meets 1.2x.
#
# Session 22 (xrun subscribes with one AddMatch; its first look waits for its
# job to start; xlurmd announces RUNNING once systemd has the unit), five runs
# of the same daemon in one session: xrun 1.13x, 1.20x, 1.07x, 1.05x and 1.29x
# systemd-run (mean 1.15x; before, seven runs had a mean of 1.23x); start
# rate 0.95x, 1.04x, 0.99x, 0.98x and 1.05x bare; systemd's CPU 0.95x, 0.91x,
# 0.88x, 0.98x and 0.94x isolated. The tolerances stay as they were: the
# spreads they keep still cover every run.
#
# Session 23 (one account lookup a submission; InvocationId after RUNNING),
# five runs of the 5-run latency check: xrun 0.92x, 1.44x, 1.20x, 1.28x and
# 1.22x systemd-run (the 1.44x failed the check); start rate 1.05x, 0.96x,
# 0.98x, 0.90x and 1.04x bare; systemd's CPU 0.88x, 0.94x, 0.86x, 1.06x and
# 0.86x isolated. With the first run of each left out and 9 counted (below),
# five runs: xrun 1.14x, 1.09x, 1.13x, 1.03x and 1.02x (mean 1.08x); start
# rate 1.07x, 0.93x, 0.97x, 1.03x and 1.05x bare; systemd's CPU 0.85x, 1.01x,
# 0.85x, 0.88x and 0.83x isolated. The tolerances stay: they cover these.
START_SPREAD=0.24
CPU_SPREAD=0.08
LAT_SPREAD=0.19
# meets RATIO OP GOAL TOLERANCE WHAT: fails unless RATIO >= GOAL - TOLERANCE
# (OP >=) or RATIO <= GOAL + TOLERANCE (OP <=).
meets() {
    awk -v r="$1" -v g="$3" -v t="$4" -v op="$2" 'BEGIN { exit !(op == ">=" ? r >= g - t : r <= g + t) }' ||
        fail "$5: ${1}x misses its goal ($2 ${3}x) by more than the ${4} measured between runs"
}

check "latency, submit to running: bare systemd-run vs xrun (9 runs each after one of each not counted, median)"
# Both commands start the same way (as_user) and wait for their job, which
# records when it began: the time from typing the command to the job running.
# The first of each is not counted: it reads its binaries from disk, and
# xlurmd's first start meets its code and its slice cold. In session 23 the
# first xrun took 341-415 ms against 138-286 ms after it, the first
# systemd-run 176-229 ms against 121-217 ms; with 5 runs counted, that run
# and one slow other made the median (1.44x once, in a run of 0.92-1.44x).
latency_runs 10
bare=("${LAT_BARE[@]}"); x=("${LAT_XRUN[@]}")
note "submit to running, ms (the first not counted): bare systemd-run ${bare[*]}; xrun ${x[*]}"
b=$(printf '%s\n' "${bare[@]:1}" | median); m=$(printf '%s\n' "${x[@]:1}" | median)
lat_ratio=$(awk "BEGIN {printf \"%.2f\", $m / $b}")
note "submit to running: bare systemd-run: ${b} ms; xrun: ${m} ms; ratio ${lat_ratio}x (goal <= 1.2x)"

check "latency, submit to finished: bare systemd-run --wait vs xrun (5 runs each, median)"
bare=(); x=()
for i in 1 2 3 4 5; do
  t0=$(date +%s%N); as_user root systemd-run --wait -q -p User=alice /bin/true; t1=$(date +%s%N)
  bare+=("$(ms "$t0" "$t1")")
  t0=$(date +%s%N); as_user alice xrun -g 0 /bin/true 2>/dev/null; t1=$(date +%s%N)
  x+=("$(ms "$t0" "$t1")")
done
b=$(printf '%s\n' "${bare[@]}" | median); m=$(printf '%s\n' "${x[@]}" | median)
note "submit to finished (xrun also fetches the output): bare systemd-run --wait: ${b} ms; xrun: ${m} ms; ratio $(awk "BEGIN {printf \"%.2f\", $m / $b}")x"

check "sustained starts, same concurrency: 60 units run 2 at a time by hand vs 60 jobs on 2 CPUs (3 rounds)"
# The guest has 2 CPUs, so xlurm runs 2 one-CPU jobs at a time; the bare side gets
# the same: 2 lanes of systemd-run --wait, 30 units each. Both until all 60 ended.
# xlurmd collects ended units in a batch every 5 s while jobs wait: 60 jobs
# take long enough for those batches to fall inside the round.
# Each lane also prints the CPU time (ticks of 10 ms) systemd, dbus-daemon and
# xlurmd spent, and the whole guest's busy time: where the time goes. Three
# rounds, as one alone varies by 10-20% under emulation; ratios of the sums.
n=60
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
dbus_pid=$(systemctl show -p MainPID --value dbus.service)
xlurmd_pid=$(systemctl show -p MainPID --value xlurmd.service)
cpu0=()
cpu_start() { cpu0=("$(ticks 1)" "$(ticks "$dbus_pid")" "$(ticks "$xlurmd_pid")" "$(busy)"); }
cpu_note() {
    last_systemd=$(( $(ticks 1) - cpu0[0] ))
    note "$1 CPU ticks: systemd $(( $(ticks 1) - cpu0[0] )), dbus-daemon $(( $(ticks "$dbus_pid") - cpu0[1] )), xlurmd $(( $(ticks "$xlurmd_pid") - cpu0[2] )), whole guest $(( $(busy) - cpu0[3] )) (of 2 CPUs)"
}
lane() { for i in $(seq $((n / 2))); do systemd-run --wait -q -p User=alice "$@" /bin/true; done; }
# The same with the isolation an xlurm job's unit has (cpuset, memory budget,
# journal fields; a job without accelerators runs in xlurm-nodev.slice, whose
# device program xlurmd set once, and has none of its own): what systemd
# itself spends on it.
# Its memory is kept on its node as xlurmd's --memory-nodes=auto keeps a job's
# on this systemd (NUMAPolicy=local before 255: see the admin guide).
if [ "$(systemctl --version | awk 'NR == 1 {print $2}')" -lt 255 ]; then
    mem_nodes() { echo NUMAPolicy=local; }
else
    mem_nodes() { echo "AllowedMemoryNodes=$1"; }
fi
iso() {
    lane -p Slice=xlurm-nodev.slice -p Type=exec -p AllowedCPUs="$1" -p "$(mem_nodes "$1")" \
        -p MemoryMax=256M -p MemorySwapMax=0 -p NoNewPrivileges=yes \
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
    cpu_note "xlurm:"
    note "xlurm: last job COMPLETED after $(ms "$t0" "$t_done") ms, every unit collected after $(ms "$t0" "$t1") ms"
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
# xlurm's job units stay in xlurm-nodev.slice until they are collected, so
# the slice holds some all through a round; the lanes' units go as soon as
# they exit, and the slice would go empty between them. systemd applies a
# slice's whole cgroup context again, its device program included, each time
# the controllers its children need change (empty or not), so one unit stays
# there for the isolated lanes, started and stopped outside the timed part.
iso_round() {
    systemd-run -q --unit=xlurm-11-keep -p Slice=xlurm-nodev.slice -p AllowedCPUs=0 \
        -p "$(mem_nodes 0)" -p MemoryMax=256M -p MemorySwapMax=0 sleep infinity
    cpu_start
    t0=$(date +%s%N)
    iso 0 & l1=$!; iso 1 & l2=$!
    wait "$l1" "$l2"
    t1=$(date +%s%N)
    iso_ms=$(ms "$t0" "$t1")
    cpu_note "isolated:"
    systemctl stop xlurm-11-keep.service
}
x_round() {
    xlurm_round
    x_ms=$(ms "$t0" "$t1")
}
bare_sum=0; iso_sum=0; x_sum=0; iso_sd=0; x_sd=0
for order in "bare iso x" "x bare iso" "iso x bare"; do
    for lane_kind in $order; do
        "${lane_kind}_round"
        case $lane_kind in iso) iso_sd=$((iso_sd + last_systemd)) ;; x) x_sd=$((x_sd + last_systemd)) ;; esac
    done
    note "lanes in the order $order: bare (2 lanes of systemd-run --wait): $n units in ${bare_ms} ms; the same units with xlurm's isolation: ${iso_ms} ms; xlurm (SubmitMany, 2 at a time, each harvested and its unit collected): $n jobs in ${x_ms} ms"
    bare_sum=$((bare_sum + bare_ms)); iso_sum=$((iso_sum + iso_ms)); x_sum=$((x_sum + x_ms))
done
start_ratio=$(awk "BEGIN {printf \"%.2f\", $bare_sum / $x_sum}")
cpu_ratio=$(awk "BEGIN {printf \"%.2f\", $x_sd / $iso_sd}")
note "start rate: ${start_ratio}x that of bare units (goal >= 0.95x); $(awk "BEGIN {printf \"%.2f\", $iso_sum / $x_sum}")x that of units as isolated as xlurm's"
note "systemd's CPU for xlurm's jobs: ${cpu_ratio}x that for the isolated units (goal <= 1.1x)"
meets "$start_ratio" ">=" 0.95 "$START_SPREAD" "start rate against bare units"
meets "$cpu_ratio" "<=" 1.1 "$CPU_SPREAD" "systemd's CPU per job against isolated units"
meets "$lat_ratio" "<=" 1.2 "$LAT_SPREAD" "xrun's submit-to-running against systemd-run's"
