#!/bin/bash
# Fair share and per-user limits on real systemd (issue 17), on the guest's 2 CPUs:
# alice queues four 1-CPU jobs, then bob one: bob's starts before alice's third
# (fair share: alice has been using the CPUs); a queued job starts no later than
# the estimated start it showed; with alice limited to one running job, her
# second waits with reason UserLimit while bob's job runs; a request over a
# limit is refused at submission; the limits and the usage survive a restart;
# `xlurm share` ranks bob above alice.
# timeout: 300
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd
alice_uid=$(id -u alice)

cleanup() {
    echo '{}' | xlurm limits --set - >/dev/null 2>&1 || true
    for u in alice bob; do
        for id in $(as_user "$u" xqueue --mine --json 2>/dev/null | grep -o '"id":[0-9]*' | cut -d: -f2); do
            as_user "$u" xcancel "$id" >/dev/null 2>&1 || true
        done
    done
}
trap cleanup EXIT
systemctl restart xlurmd

submit() { # user, seconds, extra options...: prints the job ID
    local u=$1 s=$2; shift 2
    as_user "$u" xbatch -g 0 -c 1 -t 120 "$@" --wrap "sleep $s" 2>/dev/null | awk '/Submitted batch job/ {print $4}'
}
field() { "${XB[@]}" GetJob t "$1" | grep -o "\"$2\" [a-z] [^ ]*" | awk '{print $3}' | tr -d '"'; }
wait_running() { wait_for "[ \"\$(job_state $1)\" = RUNNING ]" 120 0.5; }

check "fair share: bob's one job starts before alice's third"
a1=$(submit alice 12); a2=$(submit alice 12); a3=$(submit alice 12); a4=$(submit alice 12)
sleep 2
b1=$(submit bob 5)
note "alice: $a1 $a2 $a3 $a4; bob: $b1"
est4=$(field "$a4" estimated_start)
note "alice's fourth: estimated start $est4 ($(field "$a4" estimate))"
[ "${est4:-0}" -gt 0 ] || fail "no estimated start for a queued job behind jobs with time limits"
starts=$(as_user alice xqueue --start --mine); echo "$starts"
line4=$(echo "$starts" | awk -v id="$a4" '$1 == id')
[ -n "$line4" ] || fail "xqueue --start does not list job $a4"
assert_not_contains "$line4" "N/A"
wait_running "$b1"
wait_running "$a3"
sb=$(field "$b1" start_time); s3=$(field "$a3" start_time)
note "bob's job started at $sb, alice's third at $s3 (µs)"
[ "$sb" -lt "$s3" ] || fail "alice's third (job $a3) started before bob's job $b1"
wait_running "$a4"
s4=$(( $(field "$a4" start_time) / 1000000 ))
note "alice's fourth started at $s4, estimated start was $est4"
[ "$s4" -le "$est4" ] || fail "job $a4 started at $s4, after its estimated start $est4"
for id in "$a3" "$a4"; do "${XB[@]}" Cancel t "$id" >/dev/null; done

check "xlurm share: bob above alice"
share=$(as_user bob xlurm share); echo "$share"
fa=$(echo "$share" | awk '$1 == "alice" {print $6}'); fb=$(echo "$share" | awk '$1 == "bob" {print $6}')
[ -n "$fa" ] && [ -n "$fb" ] || fail "xlurm share lacks alice or bob"
awk -v a="$fa" -v b="$fb" 'BEGIN { exit !(b > a) }' || fail "bob's factor $fb is not above alice's $fa"

check "a limit of one running job holds alice's second, not bob's"
assert_fails as_user_sh alice "echo '{}' | xlurm limits --set -"
printf '{"users": {"%s": {"running_jobs": 1}}}\n' "$alice_uid" | xlurm limits --set -
a5=$(submit alice 20); wait_running "$a5"
a6=$(submit alice 20); b2=$(submit bob 20)
wait_running "$b2"
sleep 1
assert_eq PENDING "$(job_state "$a6")" "alice's second job under her limit"
reason=$(as_user alice xqueue --mine | awk -v id="$a6" '$1 == id')
echo "$reason"
assert_contains "$reason" "UserLimit (running jobs: 1 of 1"

check "a request over a limit is refused at submission, naming it"
printf '{"users": {"%s": {"cpus": 1}}}\n' "$alice_uid" | xlurm limits --set -
before=$(as_user alice xqueue --mine | wc -l)
out=$(as_user alice xbatch -g 0 -c 2 --wrap true 2>&1 || true); echo "$out"
assert_contains "$out" "CPUs"
assert_contains "$out" "limit set for user $alice_uid"
assert_eq "$before" "$(as_user alice xqueue --mine | wc -l)" "alice's queue after the refusal"

check "limits and usage survive a restart"
systemctl restart xlurmd
assert_contains "$(xlurm limits)" '"cpus": 1'
[ -s /var/lib/xlurm/fairshare.json ] || fail "no usage ledger in /var/lib/xlurm"
assert_contains "$(cat /var/lib/xlurm/fairshare.json)" "$alice_uid"
