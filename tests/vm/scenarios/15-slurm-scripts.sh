#!/bin/bash
# Slurm scripts on xlurm (issue 18): an xbatch script reads Slurm's job variables
# (SLURM_JOB_ID, SLURM_CPUS_PER_TASK, SLURM_MEM_PER_NODE in MiB, SLURM_NODELIST = the
# host...), which forwarded values cannot change; a directive that would change what
# runs or how often (-N 2, --begin later, an array it cannot read) is an error naming its line and
# queues nothing; a directive that changes nothing here is a warning. Also the seed's
# parity: -g defaults to 0 on this machine without accelerators, `xqueue --cancel ID`,
# `xlurmd --cancel-grace` (SIGTERM, then SIGKILL after it: the unit's TimeoutStopUSec)
# and `xbatch --version`. Dependencies (afterok chain in order, afternotok after a
# failure only, DependencyNeverSatisfied, --kill-on-invalid-dep, across a restart of
# xlurmd) and holds (user and admin), xlurm update (a running job's RuntimeMaxUSec live),
# --requeue after a unit vanished while xlurmd was down, on real systemd.
# timeout: 420
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd

dropin_dir=/run/systemd/system/xlurmd.service.d
dropin=$dropin_dir/15-grace.conf
cleanup() {
    [ -n "${stubborn:-}" ] && { "${XB[@]}" Cancel t "$stubborn" >/dev/null 2>&1 || true; }
    rm -f "$dropin"
    systemctl daemon-reload
    systemctl reset-failed xlurmd 2>/dev/null || true
    systemctl restart xlurmd
}
trap cleanup EXIT

check "xlurmd with --cancel-grace 3s (drop-in)"
mkdir -p "$dropin_dir"
printf '%s\n' "# tests/vm/scenarios/15-slurm-scripts.sh (removed at its end)" "[Service]" \
    "ExecStart=" "ExecStart=/usr/bin/xlurmd --cancel-grace 3s" >"$dropin"
systemctl daemon-reload
systemctl reset-failed xlurmd 2>/dev/null || true
systemctl restart xlurmd
systemctl show -p ExecStart --value xlurmd | grep -q -- '--cancel-grace 3s' \
    || fail "the drop-in did not take"

check "every command name prints the version as sbatch --version does"
for c in xbatch xrun xqueue xcancel xinfo xlurm; do
    v=$(as_user alice "$c" --version)
    assert_contains "$v" "xlurm 0." "$c --version"
done

# Jobs of alice in the queue (all states), as a count of IDs.
alice_jobs() { as_user alice xqueue --all --mine --json | grep -c '"id"' || true; }

check "a Slurm script reads Slurm's variables; forwarded ones change nothing"
host=$(hostname -s)
as_user_sh alice 'cat > ~/slurmenv.sh <<"EOF"
#!/bin/bash
#SBATCH --job-name=slurmenv
#SBATCH --cpus-per-task=2
#SBATCH --mem=300M
#SBATCH -N 1 -n 1
#SBATCH --partition=debug
#SBATCH --output=slurmenv-%j.out
env | grep -E "^(SLURM|XLURM)_" | sort
EOF'
out=$(as_user_sh alice 'SLURM_JOB_ID=999 SLURM_NTASKS=8 SLURM_JOB_GPUS=7 SLURM_ARRAY_TASK_ID=5 \
    SLURM_MEM_PER_CPU=10 xbatch slurmenv.sh' 2>&1) || fail "xbatch failed: $out"
echo "$out"
assert_contains "$out" "warning: #SBATCH --partition=debug is not supported here and was ignored"
id=$(awk '/Submitted batch job/ {print $4}' <<<"$out")
[ -n "$id" ] || fail "no job ID in: $out"
wait_for "[ \"\$(job_state $id)\" = COMPLETED ]" 60
env_out=$(cat "/home/alice/slurmenv-$id.out")
echo "$env_out"
for want in "SLURM_JOB_ID=$id" "SLURM_JOBID=$id" "XLURM_JOB_ID=$id" \
    "SLURM_JOB_NAME=slurmenv" "SLURM_JOB_USER=alice" "SLURM_JOB_UID=1001" \
    "SLURM_SUBMIT_DIR=/home/alice" "SLURM_SUBMIT_HOST=$host" \
    "SLURM_CPUS_PER_TASK=2" "SLURM_CPUS_ON_NODE=2" "SLURM_JOB_CPUS_PER_NODE=2" \
    "SLURM_MEM_PER_NODE=300" "SLURM_JOB_NUM_NODES=1" "SLURM_NNODES=1" "SLURM_NTASKS=1" \
    "SLURM_NPROCS=1" "SLURM_TASKS_PER_NODE=1" "SLURM_NODELIST=$host" \
    "SLURM_JOB_NODELIST=$host"; do
    grep -qxF "$want" <<<"$env_out" || fail "$want missing from the job's environment"
done
note "all of Slurm's job variables as expected"
for gone in SLURM_JOB_ID=999 SLURM_NTASKS=8 SLURM_JOB_GPUS SLURM_GPUS_ON_NODE \
    SLURM_ARRAY_TASK_ID SLURM_MEM_PER_CPU; do
    assert_not_contains "$env_out" "$gone" "the CPU job's environment"
done
assert_contains "$(as_user alice xqueue "$id")" "devices cpu" "without -g a job here has no device"

check "directives that change what runs or how often queue nothing, naming the line"
before=$(alice_jobs)
for directive in "--array=3-0" "-N 2" "--ntasks=4" "--begin=now+1hour" "--dependency=aftercorr:$id" \
    "--chdir=/tmp"; do
    as_user_sh alice "printf '#!/bin/bash\n# a comment\n#SBATCH $directive\necho ran > ~/forbidden.out\n' > ~/forbidden.sh"
    rc=0; err=$(as_user alice xbatch -g 0 forbidden.sh 2>&1) || rc=$?
    echo "$err"
    assert_ne 0 "$rc" "xbatch's exit status with #SBATCH $directive"
    assert_contains "$err" "forbidden.sh: line 3: #SBATCH" "the error names the line"
    assert_contains "$err" "nothing was queued"
done
assert_contains "$err" "#SBATCH --chdir=/tmp: xlurm runs the job in the directory"
assert_eq "$before" "$(alice_jobs)" "alice's jobs after the refused scripts"
[ ! -e /home/alice/forbidden.out ] || fail "a refused script ran"

check "xqueue --cancel: SIGTERM, then SIGKILL after --cancel-grace"
out=$(as_user alice xbatch -g 0 --wrap 'trap "" TERM; echo ready; sleep 300' 2>&1)
stubborn=$(awk '/Submitted batch job/ {print $4}' <<<"$out")
wait_for "[ \"\$(job_state $stubborn)\" = RUNNING ]" 60
wait_for "as_user alice xlurm log $stubborn | grep -q ready" 30
assert_eq 3s "$(unit_prop "xlurm-job-$stubborn.service" TimeoutStopUSec)" "the unit's stop timeout"
t0=$(date +%s.%N)
as_user alice xqueue --cancel "$stubborn"
wait_for "[ \"\$(job_state $stubborn)\" = CANCELLED ]" 30 0.1
took=$(awk "BEGIN {print $(date +%s.%N) - $t0}")
note "the job that ignores SIGTERM ended after ${took}s"
awk "BEGIN {exit !($took >= 2.5 && $took < 9)}" || fail "ended after ${took}s, not about 3 s"
assert_contains "$(as_user alice xqueue "$stubborn")" "killed with SIGKILL after the cancel grace"
stubborn=

# job_field ID KEY: a number or string of the job's GetJob record (as root).
job_field() {
    "${XB[@]}" GetJob t "$1" | grep -o "\"$2\" [a-z] \(\"[^\"]*\"\|[0-9]*\)" | head -1 | cut -d' ' -f3- | tr -d '"'
}
# submit USER ARGS...: xbatch as USER; prints the job ID.
submit() {
    local u=$1 out; shift
    out=$(as_user "$u" xbatch "$@" 2>&1) || fail "xbatch $*: $out"
    awk '/Submitted batch job/ {print $4}' <<<"$out"
}

check "an afterok chain of three runs in order, also across a restart of xlurmd"
a=$(submit alice --wrap 'sleep 4')
b=$(submit alice -d "afterok:$a" --wrap 'sleep 1')
as_user_sh alice "printf '#!/bin/bash\n#SBATCH --dependency=afterok:$b\ntrue\n' > ~/third.sh"
c=$(submit alice third.sh)
wait_for "[ \"\$(job_state $a)\" = RUNNING ]" 60
assert_eq PENDING "$(job_state "$b")" "b while a runs"
assert_contains "$(job_field "$b" reason)" "Dependency" "b's reason"
assert_contains "$(as_user alice xqueue "$c")" "afterok:$b" "xqueue ID shows the dependency"
systemctl restart xlurmd
assert_eq PENDING "$(job_state "$c")" "c after a restart of xlurmd"
wait_for "[ \"\$(job_state $c)\" = COMPLETED ]" 120
for pair in "$a $b" "$b $c"; do
    set -- $pair
    end=$(job_field "$1" end_time); start=$(job_field "$2" start_time)
    [ "$start" -ge "$end" ] || fail "job $2 started at $start, before job $1 ended at $end"
done
note "a, b, c ended COMPLETED, each started after the one before ended"

check "afternotok runs after a failure only; an unmeetable dependency waits or is cancelled"
bad=$(submit alice --wrap 'exit 3')
on_fail=$(submit alice -d "afternotok:$bad" --wrap 'true')
on_ok=$(submit alice -d "afternotok:$a" --wrap 'echo must-not-run')
killed=$(submit alice -d "afterok:$bad" --kill-on-invalid-dep=yes --wrap 'echo must-not-run')
wait_for "[ \"\$(job_state $on_fail)\" = COMPLETED ]" 60
assert_eq FAILED "$(job_state "$bad")"
wait_for "[ \"\$(job_state $killed)\" = CANCELLED ]" 30
assert_contains "$(job_field "$killed" detail)" "DependencyNeverSatisfied"
assert_eq PENDING "$(job_state "$on_ok")" "a job whose dependency can never be met"
assert_contains "$(job_field "$on_ok" reason)" "DependencyNeverSatisfied"
as_user alice xcancel "$on_ok"
rc=0; err=$(as_user bob xbatch -d "afterok:999999" --wrap true 2>&1) || rc=$?
assert_ne 0 "$rc" "a dependency on a job that does not exist"
assert_contains "$err" "no job 999999"

check "holds: the owner's and an admin's"
held=$(submit alice -H --wrap 'true')
assert_contains "$(job_field "$held" reason)" "JobHeldUser"
other=$(submit bob --wrap 'true')
wait_for "[ \"\$(job_state $other)\" = COMPLETED ]" 60
assert_eq PENDING "$(job_state "$held")" "a held job"
rc=0; err=$(as_user bob xlurm release "$held" 2>&1) || rc=$?
assert_ne 0 "$rc" "bob releasing alice's job"
xlurm hold "$held" >/dev/null
assert_contains "$(job_field "$held" reason)" "JobHeldAdmin" "root's hold"
rc=0; err=$(as_user alice xlurm release "$held" 2>&1) || rc=$?
assert_ne 0 "$rc" "alice releasing an admin's hold"
assert_contains "$err" "only an admin may release it"
xlurm release "$held"
wait_for "[ \"\$(job_state $held)\" = COMPLETED ]" 60

check "xlurm update: a pending job's CPUs; a running job's time limit (raised: RuntimeMaxUSec, live; lowered: kept by xlurmd)"
upd=$(submit alice -H -c 1 --wrap 'echo cpus=$SLURM_CPUS_PER_TASK')
as_user alice xlurm update "$upd" --cpus 2 --name resized
as_user alice xlurm release "$upd"
wait_for "[ \"\$(job_state $upd)\" = COMPLETED ]" 60
assert_contains "$(as_user alice xlurm log "$upd")" "cpus=2" "the updated job's SLURM_CPUS_PER_TASK"
assert_eq resized "$(job_field "$upd" name)" "its new name"
long=$(submit alice -t 10m --wrap 'sleep 300')
wait_for "[ \"\$(job_state $long)\" = RUNNING ]" 60
unit=xlurm-job-$long.service
wait_for "[ \"\$(unit_prop $unit ActiveState)\" = active ]" 30
assert_eq 10min "$(unit_prop $unit RuntimeMaxUSec)" "RuntimeMaxUSec at the start"
rc=0; err=$(as_user alice xlurm update "$long" -t 20m 2>&1) || rc=$?
assert_ne 0 "$rc" "alice raising her running job's time limit"
assert_contains "$err" "needs the polkit authorization"
xlurm update "$long" -t 15m
assert_eq 15min "$(unit_prop $unit RuntimeMaxUSec)" "raised by root, live"
# Lowered to 45 s of run time, above what it has run: xlurmd keeps it (no reload of
# PID 1, the unit keeps 15min as a backstop) and stops the job at it, TIMEOUT.
as_user alice xlurm update "$long" -t 45
assert_eq 15min "$(unit_prop $unit RuntimeMaxUSec)" "lowered by alice: the unit's limit stays"
wait_for "[ \"\$(job_state $long)\" = TIMEOUT ]" 60
assert_contains "$("${XB[@]}" GetJob t "$long")" "lowered while it ran"
[ ! -e "/run/systemd/system/$unit.d" ] || fail "the time limit's drop-in outlived the job"
note "the job ended TIMEOUT at its new limit; its drop-in is gone"

check "--requeue: a job whose unit vanished while xlurmd was down is queued again; others end LOST"
again=$(submit alice --requeue --wrap 'echo "run ${SLURM_RESTART_COUNT-unset}"; sleep 300')
once=$(submit alice --wrap 'sleep 300')
wait_for "[ \"\$(job_state $again)\" = RUNNING ] && [ \"\$(job_state $once)\" = RUNNING ]" 60
# As in Slurm, SLURM_RESTART_COUNT is set only once the job was restarted.
wait_for "as_user alice xlurm log $again | grep -q 'run unset'" 30
systemctl stop xlurmd
systemctl stop "xlurm-job-$again.service" "xlurm-job-$once.service"
systemctl reset-failed "xlurm-job-$again.service" "xlurm-job-$once.service" 2>/dev/null || true
systemctl start xlurmd
assert_eq LOST "$(job_state "$once")" "the job without --requeue"
wait_for "[ \"\$(job_state $again)\" = RUNNING ]" 60
assert_eq 1 "$(job_field "$again" restart_count)" "its restart count"
wait_for "as_user alice xlurm log $again | grep -q 'run 1'" 30
assert_contains "$(as_user alice xqueue "$again")" "Restarts: 1"
as_user alice xcancel "$again"
wait_for "[ \"\$(job_state $again)\" = CANCELLED ]" 30
note "queued again with its ID, ran with SLURM_RESTART_COUNT=1"

check "an array with %2 never runs more than two tasks at once; each task sees its own index"
as_user_sh alice 'rm -f ~/arr.log; cat > ~/array.sh <<"EOF2"
#!/bin/bash
#SBATCH --array=1-6%2
#SBATCH -c 1
#SBATCH -o arr-%A_%a.out
echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID count $SLURM_ARRAY_TASK_COUNT"
echo "start $(date +%s.%N)" >> ~/arr.log
sleep 2
echo "end $(date +%s.%N)" >> ~/arr.log
EOF2'
arr=$(submit alice array.sh)
wait_for "as_user alice xqueue | grep -q '${arr}_\['" 30
note "$(as_user alice xqueue | grep "${arr}_")"
assert_contains "$(as_user alice xqueue)" "JobArrayTaskLimit"
wait_for "[ \"\$(job_state $arr)\" = COMPLETED ]" 180
for i in 1 2 3 4 5 6; do
    assert_contains "$(as_user alice xlurm log "${arr}_$i")" "task $i of $arr count 6" "task $i's output"
    assert_contains "$(cat "/home/alice/arr-${arr}_$i.out")" "task $i of $arr" "task $i's own file (-o arr-%A_%a.out)"
    [ "$(stat -c %U "/home/alice/arr-${arr}_$i.out")" = alice ] || fail "task $i's file is not alice's"
done
most=$(sort -k2 -n /home/alice/arr.log | awk '$1 == "start" {n++} $1 == "end" {n--} n > m {m = n} END {print m}')
assert_eq 2 "$most" "the most tasks running at once"
done=$(as_user alice xqueue --all --json | grep -c "\"array\": *\"${arr}_[1-6]\"" || true)
assert_eq 6 "$done" "tasks listed as ${arr}_N"
