#!/bin/bash
# The second security review (../shared/notes/security-review-aa25702.md), findings
# fixed so far, each with the review's repro and its figure.
# - H1: a 21-byte --array (`0-999999:3,1-999999:3`, 333,334 ranges once merged) made
#   4 MB of memory, of every job-log record and of every listing line. Now refused,
#   naming the bound (1,024 ranges): 25 tries and one SubmitMany of 40 such specs cost
#   xlurmd under 20 MiB of RSS and the job log under 5 MiB; an array at the bound is
#   queued, listed in a short line and shown whole by `xqueue ID`.
# - M4: an array task's -o file, named when the task starts (%A_%a), was opened through
#   a symbolic link bob planted in a shared directory, and ignored alice's umask. Now
#   her file is untouched (the output is in the journal) and umask 077 gives 0600.
# timeout: 360
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd

cleanup() {
    local ids
    ids=$(active_ids alice; active_ids bob)
    # shellcheck disable=SC2086
    [ -z "$ids" ] || xcancel $ids >/dev/null 2>&1 || true
    rm -rf /srv/xlproj /home/alice/precious
}
trap cleanup EXIT

pid_xlurmd() { systemctl show -p MainPID --value xlurmd; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$(pid_xlurmd)/status"; }
log_kib() { echo $(( $(stat -c %s /var/lib/xlurm/jobs.log) / 1024 )); }
jid() { awk '/Submitted batch job/ {print $4}'; }
wide='0-999999:3,1-999999:3'

check "H1: 25 arrays of 333,334 ranges are refused, naming the bound; xlurmd and its log stay small"
r0=$(rss_kib); l0=$(log_kib)
for i in $(seq 25); do
    if out=$(as_user bob xbatch -H -g 0 -n h1 --array="$wide" --wrap true 2>&1); then
        fail "try $i was queued: $out"
    fi
done
assert_contains "$out" "333334 separate ranges"
assert_contains "$out" "1024"
r1=$(rss_kib); l1=$(log_kib)
note "25 tries: xlurmd RSS +$(( (r1 - r0) / 1024 )) MiB, jobs.log +$(( l1 - l0 )) KiB"
[ $(( r1 - r0 )) -lt $(( 20 * 1024 )) ] || fail "xlurmd grew by $(( (r1 - r0) / 1024 )) MiB"
[ $(( l1 - l0 )) -lt $(( 5 * 1024 )) ] || fail "jobs.log grew by $(( l1 - l0 )) KiB"
assert_eq "$(active_ids bob | wc -l)" 0

check "H1b: one SubmitMany of 40 such specs (a 6 KB message) is refused whole"
args=()
for i in $(seq 40); do args+=(4 argv as 1 /bin/true cwd s /tmp hold b true array s "$wide"); done
r0=$(rss_kib)
if out=$(as_user bob busctl call --timeout=300 "${XD[@]}" SubmitMany 'aa{sv}' 40 "${args[@]}" 2>&1); then
    fail "SubmitMany queued them: $out"
fi
assert_contains "$out" "1024"
grown=$(( $(rss_kib) - r0 ))
note "one SubmitMany of 40: xlurmd RSS +$(( grown / 1024 )) MiB"
[ "$grown" -lt $(( 20 * 1024 )) ] || fail "one call grew xlurmd by $(( grown / 1024 )) MiB"
assert_eq "$(active_ids bob | wc -l)" 0

check "H1c: an array at the bound (1,024 ranges) is queued, listed short, shown whole"
a=$(as_user bob xbatch -H -g 0 -n edge --array='0-3071:3,1-3071:3' --wrap true | jid)
[ -n "$a" ] || fail "the array at the bound was refused"
line=$(as_user bob xqueue | grep -E "^ *${a}_\\[" || true)
note "listed: $line"
label=$(printf '%s\n' "$line" | awk '{print $1}')
[ "${#label}" -lt 80 ] || fail "a listing line shows ${#label} bytes of indices: $label"
assert_contains "$label" ",…]"
whole=$(as_user bob xqueue "$a" --json | grep -o '"array": *"[^"]*"')
[ "${#whole}" -gt 9000 ] || fail "xqueue ID shows ${#whole} bytes, not every range"
as_user bob xcancel "$a" >/dev/null

check "M4a: bob's symlink does not make alice's array task overwrite her own file"
groupadd -f xlproj
usermod -aG xlproj alice
usermod -aG xlproj bob
install -d -m 2775 -g xlproj /srv/xlproj
echo precious >/home/alice/precious
chown alice: /home/alice/precious
a=$(as_user alice xbatch -H -g 0 --array=0-0 -o '/srv/xlproj/out-%A_%a.txt' --wrap 'echo job-output' | jid)
as_user bob ln -s /home/alice/precious "/srv/xlproj/out-${a}_0.txt"
as_user alice xlurm release "$a" >/dev/null
wait_for "case \$(job_state $a) in PENDING|RUNNING|'') false;; *) true;; esac" 90
assert_eq "$(cat /home/alice/precious)" precious
assert_eq "$(job_state "$a")" COMPLETED
log=$(as_user alice xlurm log "$a" 2>&1 || true)
assert_contains "$log" "job-output"

check "M4b: an array task's output file gets the submitter's umask (077: 0600)"
a=$(as_user_sh alice 'cd /srv/xlproj && umask 077 && xbatch -g 0 --array=0-0 -o /srv/xlproj/priv-%A_%a.txt --wrap "echo secret"' | jid)
wait_for "[ -s /srv/xlproj/priv-${a}_0.txt ]" 90
assert_eq "$(stat -c %a "/srv/xlproj/priv-${a}_0.txt")" 600
