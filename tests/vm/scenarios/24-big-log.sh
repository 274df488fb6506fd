#!/bin/bash
# One `xlurm log` cannot take xlurmd off the bus (issue 16, item 2). alice's job prints
# 12,000 lines of 3,000 bytes (36 MB: more than one system-bus message may carry, 32 MiB;
# ReadLog pages used to be bounded by lines only, and dbus-daemon disconnected xlurmd
# over the oversized reply, leaving an "active" daemon with no name). Now every page is
# bounded by bytes: the log reads back whole and in order, bob's calls keep working
# meanwhile, and xlurmd keeps its name and is not restarted.
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

check "xlurmd kept its name and was not restarted"
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd active"
assert_eq "$owner0" "$(xlurmd_owner)" "the same connection owns org.xlurm.Scheduler1"
assert_eq "$restarts0" "$(systemctl show -p NRestarts --value xlurmd)" "no restart"
assert_ok as_user bob xqueue
