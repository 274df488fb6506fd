#!/bin/bash
# An admin stopping a job's unit behind xlurm's back (systemctl stop xlurm-job-N): the
# job ends CANCELLED with a detail saying it was stopped outside xlurm, its resources
# are freed, and the next job runs.
# timeout: 120
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
[ "$state" = CANCELLED ] || fail "job $id stopped by systemctl ended $state ($detail), expected CANCELLED: src/daemon/outcome.rs classify() maps Result=success + SIGTERM (ExecMainCode=2, status 15) of a unit stopped from outside to FAILED 'killed by signal 15'; service.rs reconcile() only says 'stopped outside xlurm' when the unit is already gone"
assert_contains "$detail" "outside xlurm" "detail names the outside stop"
check "its CPU is free again"
rc=0; as_user alice xrun -t 30 /bin/true || rc=$?
assert_eq 0 "$rc" "next job ran"
