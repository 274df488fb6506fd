#!/bin/bash
# An admin stopping a job's unit behind xlurm's back (systemctl stop xlurm-job-N): the
# job ends CANCELLED with a detail saying it was stopped outside xlurm, its resources
# are freed, and the next job runs.
# timeout: 180
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd

systemctl start xlurmd
D=(org.xlurm.Scheduler1 /org/xlurm/Scheduler1 org.xlurm.Scheduler1)
B=(busctl call --timeout=60 -- "${D[@]}")
field() { "${B[@]}" GetJob t "$1" | grep -o "\"$2\" [a-z] \"[^\"]*\"\|\"$2\" [a-z] [^ \"]*" | head -1 | cut -d' ' -f3- | tr -d '"'; }

out=$(as_user alice xbatch -t 300 -n xlurm-26 --wrap 'sleep 1000' 2>&1)
id=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
wait_for "[ \"\$(field $id state)\" = RUNNING ]" 60
check "systemctl stop xlurm-job-$id.service (root, outside xlurm)"
systemctl stop "xlurm-job-$id.service"
wait_for "case \$(field $id state) in PENDING|RUNNING) false;; *) true;; esac" 60
state=$(field "$id" state); detail=$(field "$id" detail); result=$(field "$id" result)
note "state=$state result=$result detail=$detail"
[ "$state" = CANCELLED ] || fail "job $id stopped by systemctl ended $state ($detail), expected CANCELLED: src/daemon/systemd/outcome.rs classify() maps Result=success + SIGTERM (ExecMainCode=2, status 15) of a unit stopped from outside to FAILED 'killed by signal 15'; service/reconcile.rs reconcile() only says 'stopped outside xlurm' when the unit is already gone"
assert_contains "$detail" "outside xlurm" "detail names the outside stop"
check "its CPU is free again"
rc=0; as_user alice xrun -t 30 /bin/true || rc=$?
assert_eq 0 "$rc" "next job ran"

# service.rs restart_lost() tells a unit systemd lost before it ran (started again) from
# one that ran and was stopped (CANCELLED) by asking the journal as journal::unit_started does.
check "the journal query behind restart_lost: a started unit is found, a never-started one is not"
since=@$(( $(date +%s) - 600 ))
q() { journalctl --output=json --no-pager --quiet --lines=1 --since="$since" "UNIT=$1" MESSAGE_ID=7d4958e842da4a758f6c1cdc7b36dcc5 + "_SYSTEMD_UNIT=$1"; }
[ -n "$(q "xlurm-job-$id.service")" ] || fail "no 'Starting' entry for xlurm-job-$id.service: journal.rs unit_started() would start a stopped job again"
[ -z "$(q xlurm-job-999999.service)" ] || fail "entries for a unit that never existed: the match in journal.rs unit_started() is too wide"
note "ok"

# A job that exits 0 leaving a process that ignores SIGTERM: xlurm records
# COMPLETED, then stopping the exited unit has to SIGKILL the leftover after
# TimeoutStopSec (10 s), which leaves the unit failed; xlurmd resets it.
check "a leftover that ignores SIGTERM is killed and its unit does not stay failed"
out=$(as_user alice xbatch -n xlurm-26b --wrap '(trap "" TERM; exec sleep 1001) & exit 0' 2>&1)
id=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
wait_for "[ \"\$(field $id state)\" = COMPLETED ]" 60
wait_for "! pgrep -u alice -f 'sleep 1001' >/dev/null" 60
wait_for "[ \"\$(unit_prop xlurm-job-$id.service LoadState)\" = not-found ]" 30
assert_eq "" "$(systemctl list-units --failed --plain --no-legend "xlurm-job-$id.service")" "no failed unit left"
