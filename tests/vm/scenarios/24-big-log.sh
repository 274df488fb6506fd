#!/bin/bash
# One `xlurm log` cannot take xlurmd off the bus (issue 16, item 2). alice's job prints
# 12,000 lines of 3,000 bytes (36 MB: more than one system-bus message may carry, 32 MiB;
# ReadLog pages used to be bounded by lines only, and dbus-daemon disconnected xlurmd
# over the oversized reply, leaving an "active" daemon with no name). Now every page is
# bounded by bytes: the log reads back whole and in order, bob's calls keep working
# meanwhile, and xlurmd keeps its name and is not restarted. Then xlurm log -f of a
# chatty job (20,000 lines) against journald itself: all lines once and in order,
# and the rates (moved from 11-bench, which came within 17 s of its timeout).
# timeout: 300
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd

systemctl start xlurmd
out=/tmp/xlurm-24-log.txt
cleanup() { rm -f "$out"; }
trap cleanup EXIT
restarts0=$(systemctl show -p NRestarts --value xlurmd)
owner0=$(xlurmd_owner)

check "alice's job prints 12,000 lines of 3,000 bytes"
prog='l=$(head -c 2990 /dev/zero | tr "\0" x); for i in $(seq 12000); do echo "$i:$l"; done'
id=$(as_user alice "${XB[@]}" Submit 'a{sv}' 3 argv as 3 /bin/bash -c "$prog" cwd s /home/alice \
    name s xlurm-24 | awk '{print $2}')
wait_for "[ \"\$(job_state $id)\" = COMPLETED ]" 180 0.5
note "job $id COMPLETED"

check "xlurm log reads it back whole while bob's calls keep working"
t0=$(date +%s)
as_user alice xlurm log "$id" >"$out" &
logpid=$!
for i in 1 2 3; do
    timeout 30 setpriv --reuid=bob --regid=bob --init-groups --reset-env env LANG=C.UTF-8 \
        xqueue >/dev/null || fail "bob's xqueue failed while alice's log was read"
    sleep 1
done
wait "$logpid" || fail "xlurm log $id failed"
note "read in $(( $(date +%s) - t0 )) s: $(wc -c <"$out") bytes"
assert_eq 12000 "$(wc -l <"$out")" "lines read back"
assert_eq 0 "$(awk -F: '$1 != NR || length($0) != length(NR) + 2991' "$out" | wc -l)" \
    "every line in order and whole"

check "xlurm log -f of a chatty job on real journald: 20,000 lines, all once and in order"
sub=$(as_user alice xbatch -g 0 --wrap 'seq -f "chatty %g" 1 20000' 2>&1)
id=$(echo "$sub" | awk '/Submitted batch job/ {print $4}')
t0=$(date +%s%N)
as_user alice xlurm log -f "$id" >/tmp/xlurm-24-follow.txt
t1=$(date +%s%N)
got=$(grep -c '^chatty ' /tmp/xlurm-24-follow.txt || true)
assert_eq 20000 "$got" "lines xlurm log -f printed"
assert_eq "$(seq -f 'chatty %g' 1 20000)" "$(grep '^chatty ' /tmp/xlurm-24-follow.txt)" "every line once, in order"
t2=$(date +%s%N)
direct=$(journalctl -q --no-pager -o cat -u "xlurm-job-$id.service" | grep -c '^chatty ' || true)
t3=$(date +%s%N)
f_ms=$(ms "$t0" "$t1"); j_ms=$(ms "$t2" "$t3")
# When journald stored the first and the last line: its own ingestion rate, and how
# long after the last line was stored xlurm log -f had printed it (does it keep up?).
ts() { journalctl -q --no-pager -o json -u "xlurm-job-$id.service" "MESSAGE=$1" | grep -o '"__REALTIME_TIMESTAMP":"[0-9]*"' | head -1 | cut -d'"' -f4; }
first_us=$(ts "chatty 1"); last_us=$(ts "chatty 20000")
if [ -n "$first_us" ] && [ -n "$last_us" ]; then
    ingest_ms=$(( (last_us - first_us) / 1000 ))
    lag_ms=$(( t1 / 1000000 - last_us / 1000 ))
    note "journald stored the 20000 lines over ${ingest_ms} ms ($(awk "BEGIN {printf \"%.0f\", 20000000 / ($ingest_ms + 1)}") lines/s under TCG); xlurm log -f had printed the last one ${lag_ms} ms after journald stored it"
fi
note "xlurm log -f (job start to last line, through xlurmd): 20000 lines in ${f_ms} ms = $(awk "BEGIN {printf \"%.0f\", 20000000 / ($f_ms + 1)}") lines/s; journalctl -u alone, after the fact: $direct lines in ${j_ms} ms = $(awk "BEGIN {printf \"%.0f\", $direct * 1000 / ($j_ms + 1)}") lines/s (TCG; natively: cargo bench --bench log_follow)"
rm -f /tmp/xlurm-24-follow.txt

check "xlurmd kept its name and was not restarted"
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd active"
assert_eq "$owner0" "$(xlurmd_owner)" "the same connection owns org.xlurm.Scheduler1"
assert_eq "$restarts0" "$(systemctl show -p NRestarts --value xlurmd)" "no restart"
assert_ok as_user bob xqueue
