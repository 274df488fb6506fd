#!/bin/bash
# xlurmd --user: the same daemon on alice's session bus, starting jobs in her
# own systemd user manager, for trying xlurm without root.
# timeout: 180
set -euo pipefail
. "$XLURM_VM_LIB"

uid=$(id -u alice)
systemctl start "user@$uid.service"
rt=/run/user/$uid
wait_for "[ -S $rt/bus ]" 60
ua() { as_user alice env XDG_RUNTIME_DIR=$rt DBUS_SESSION_BUS_ADDRESS=unix:path=$rt/bus "$@"; }
cleanup() { pkill -u alice -x xlurmd || true; systemctl stop "user@$uid.service" || true; }
trap cleanup EXIT

check "a non-root xlurmd on the system bus is refused with exit 78"
rc=0; out=$(as_user alice xlurmd 2>&1) || rc=$?
assert_eq 78 "$rc" "exit status"
assert_contains "$out" "use --user"

check "xlurmd --user serves alice's session bus"
ua bash -c 'xlurmd --user --no-cgroup-check --backends none >/tmp/xlurmd-user.log 2>&1 &'
wait_for "ua busctl --user status org.xlurm.Scheduler1 >/dev/null 2>&1" 60
rc=0; out=$(ua xlurm --user run -g 0 bash -c 'echo user-mode-$XLURM_JOB_ID; exit 4' 2>&1) || rc=$?
echo "$out"
assert_eq 4 "$rc" "exit code through the user manager"
assert_contains "$(ua xlurm --user queue --all)" "FAILED"
wait_for "journalctl _UID=$uid -o cat --no-pager | grep -q user-mode-1" 30
check "xrun and xlurm log show a --user job's output (read with journalctl --user)"
if ! grep -q "^user-mode-1$" <<<"$out"; then
    journalctl -o json --no-pager _UID="$uid" MESSAGE=user-mode-1 | tr ',' '\n' | grep -E '"(_SYSTEMD_USER_UNIT|_SYSTEMD_UNIT|XLURM_JOB_ID|__REALTIME_TIMESTAMP|_TRANSPORT)"' | sed 's/^/   entry: /' || true
    ua journalctl --user -o cat --no-pager _SYSTEMD_USER_UNIT=xlurm-job-1.service 2>&1 | head -3 | sed 's/^/   journalctl --user: /' || true
fi
assert_contains "$out" "user-mode-1" "xrun printed the job's output"
assert_contains "$(ua xlurm --user log 1 2>&1)" "user-mode-1" "xlurm log"
# A line journald could not tie to the job's user unit (its process exited
# before journald looked up its cgroup: CI saw "user-mode-1" stored with
# neither the unit nor the job ID, and xrun printed nothing) is still the
# job's by its identifier, which the output stream itself carries. One
# written with the identifier from outside the unit stands for it.
ua systemd-cat -t xlurm-job-1 echo "user-mode-untied-1"
wait_for "ua journalctl --user -o cat --no-pager SYSLOG_IDENTIFIER=xlurm-job-1 | grep -q user-mode-untied-1" 30
assert_contains "$(ua journalctl --user -o cat --no-pager SYSLOG_IDENTIFIER=xlurm-job-1)" "user-mode-1" "the job's own lines carry the identifier"
assert_contains "$(ua xlurm --user log 1 2>&1)" "user-mode-untied-1" "xlurm log finds a line without the unit"
assert_contains "$(cat /tmp/xlurmd-user.log)" "ready on the session bus"
