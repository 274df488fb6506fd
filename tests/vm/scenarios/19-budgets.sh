#!/bin/bash
# Budgets per user (issue 16, items 4 and 5). alice queues 1,100 jobs with an open
# --output file each (xbatch -o): the default budget of 256 holds (an xrun --pty, whose
# terminal is held the same way, is refused then too),
# the rest are refused with LimitExceeded naming --max-output-files-per-user, xlurmd's
# descriptors stay far from its limit, and bob's job still starts (backfilled) and ends
# normally. (Before the budgets, about 1,000 such jobs exhausted xlurmd's descriptors
# and other users' jobs ended LAUNCH_FAILED.) Then, with --max-pending-bytes-per-user=4M,
# big batch scripts fit until the budget and the next is refused naming it, with
# nothing queued or written. A refusal changes nothing: same pending jobs, same job log.
# timeout: 420
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd

dropin_dir=/run/systemd/system/xlurmd.service.d
dropin=$dropin_dir/19-budgets.conf
cleanup() {
    local ids
    ids=$(active_ids alice; active_ids bob)
    # shellcheck disable=SC2086
    [ -z "$ids" ] || xcancel $ids >/dev/null 2>&1 || true
    rm -f "$dropin" /home/alice/19-out-* /home/alice/19-res-* /home/alice/19-big.sh
    systemctl daemon-reload
    systemctl reset-failed xlurmd 2>/dev/null || true
    systemctl restart xlurmd
}
trap cleanup EXIT
systemctl restart xlurmd
pid=$(systemctl show -p MainPID --value xlurmd)
note "xlurmd's descriptor limit: $(grep 'Max open files' "/proc/$pid/limits")"
soft=$(awk '/Max open files/ {print $4}' "/proc/$pid/limits")
[ "$soft" -ge 65536 ] || fail "xlurmd's soft descriptor limit is $soft (LimitNOFILE= in the unit)"

pending_of() { active_ids "$1" PENDING | wc -l; }
log_size() { stat -c %s /var/lib/xlurm/jobs.log; }

check "alice holds the machine's first CPU; her --output jobs need both and wait"
blocker=$(as_user alice xbatch -c 1 -t 1h --wrap 'sleep 1000' 2>&1 | awk '/Submitted batch job/ {print $4}')
wait_for "[ \"\$(job_state $blocker)\" = RUNNING ]" 60

check "alice queues 1,100 jobs with an open --output file each (xbatch -o, 3 at a time)"
t0=$(date +%s)
seq 1100 | as_user alice xargs -P 3 -I{} sh -c \
    'xbatch -c 2 -t 5 -o 19-out-{} --wrap true >19-res-{} 2>&1; echo "rc=$?" >>19-res-{}' || true
ok=$(cat /home/alice/19-res-* | grep -c '^Submitted batch job' || true)
refused=$(cat /home/alice/19-res-* | grep -c -- '--max-output-files-per-user' || true)
answers=$(ls /home/alice/19-res-* | wc -l)
note "$answers answers: $ok queued, $refused refused in $(( $(date +%s) - t0 )) s"
note "a refusal: $(grep -m1 -h -- '--max-output-files-per-user' /home/alice/19-res-*)"
other=$(grep -L -e '^Submitted batch job' -e '--max-output-files-per-user' /home/alice/19-res-* || true)
[ -z "$other" ] || { head -5 $other; fail "unexpected answers in $(echo "$other" | wc -l) files"; }
assert_eq 1100 "$answers" "every submission answered"
assert_eq 256 "$ok" "jobs with --output queued (the default budget)"
assert_eq 844 "$refused" "refused with LimitExceeded"
fds=$(ls "/proc/$pid/fd" | wc -l)
note "xlurmd holds $fds descriptors"
[ "$fds" -lt 600 ] || fail "xlurmd holds $fds descriptors for 256 outputs"

check "with her 256 descriptors held, alice's xrun --pty (a terminal held the same way) is refused too"
rc=0; out=$(as_user alice timeout 60 script -qec "xrun --pty -c 2 -t 5 true" /dev/null < <(sleep 30) 2>&1) || rc=$?
echo "$out"
[ "$rc" -ne 0 ] || fail "xrun --pty was accepted over the budget"
assert_contains "$out" "--max-output-files-per-user"
assert_eq 256 "$(pending_of alice)" "nothing more queued"

check "bob's job still starts (backfilled beside the blocker) and ends normally"
out=$(as_user bob timeout 120 xrun -c 1 -t 60 /bin/sh -c 'echo bob-19-ok' 2>&1) && rc=0 || rc=$?
echo "$out"
assert_eq 0 "$rc" "bob's xrun"
assert_contains "$out" bob-19-ok
assert_eq 256 "$(pending_of alice)" "alice's pending jobs untouched"

check "alice cancels her --output jobs; her budget comes back"
ids=$(active_ids alice PENDING)
# shellcheck disable=SC2086
as_user alice xcancel $ids >/dev/null
rc=0; out=$(as_user alice xbatch -c 2 -t 5 -o 19-out-again --wrap true 2>&1) || rc=$?
assert_eq 0 "$rc" "an --output job after the cancel: $out"
as_user alice xcancel "$(echo "$out" | awk '/Submitted batch job/ {print $4}')" "$blocker" >/dev/null

check "with --max-pending-bytes-per-user=4M, big scripts fit until the budget"
mkdir -p "$dropin_dir"
printf '%s\n' "# tests/vm/scenarios/19-budgets.sh (removed at its end)" "[Service]" \
    "ExecStart=" "ExecStart=/usr/bin/xlurmd --max-pending-bytes-per-user=4M" >"$dropin"
systemctl daemon-reload
systemctl reset-failed xlurmd 2>/dev/null || true
systemctl restart xlurmd
blocker=$(as_user alice xbatch -c 1 -t 1h --wrap 'sleep 1000' 2>&1 | awk '/Submitted batch job/ {print $4}')
wait_for "[ \"\$(job_state $blocker)\" = RUNNING ]" 60
# A 900 KiB batch script: four fit in 4 MiB, the fifth does not.
{ echo '#!/bin/bash'; echo '#SBATCH -c 2'; head -c 921600 /dev/zero | tr '\0' '#' | fold -w 100; echo; echo true; } \
    >/home/alice/19-big.sh
chown alice /home/alice/19-big.sh
for i in 1 2 3 4; do
    assert_ok as_user alice xbatch 19-big.sh
done
before_jobs=$(active_ids alice | wc -l)
before_log=$(log_size)
rc=0; out=$(as_user alice xbatch 19-big.sh 2>&1) || rc=$?
echo "$out"
assert_ne 0 "$rc" "the fifth big script"
assert_contains "$out" "--max-pending-bytes-per-user"
assert_contains "$out" "the limit is 4M"
assert_eq "$before_jobs" "$(active_ids alice | wc -l)" "nothing queued"
assert_eq "$before_log" "$(log_size)" "nothing written to the job log"
# bob has a budget of his own.
assert_ok as_user bob xbatch -c 2 -t 60 --wrap true
