#!/bin/bash
# journald keeps a persistent journal, polkit answers, the test users exist.
# timeout: 60
set -euo pipefail
. "$XLURM_VM_LIB"

check "persistent journal"
mid=$(cat /etc/machine-id)
[ -d "/var/log/journal/$mid" ] || fail "/var/log/journal/$mid missing"
assert_ok test -n "$(ls "/var/log/journal/$mid"/*.journal 2>/dev/null)"
assert_contains "$(journalctl --header -q 2>/dev/null | grep -m1 'File path')" /var/log/journal "journal file on disk"

check "polkit answers"
assert_ok pkcheck --action-id org.freedesktop.systemd1.manage-units --process $$
rc=0
as_user_sh alice 'pkcheck --action-id org.freedesktop.systemd1.manage-units --process $$' >/dev/null 2>&1 || rc=$?
assert_ne 0 "$rc" "alice is not authorized without authentication (pkcheck exit)"

check "test users"
assert_eq "uid=1001(alice) gid=1001(alice) groups=1001(alice)" "$(as_user alice id)" "alice"
assert_eq 1002 "$(id -u bob)" "bob uid"
assert_eq 1003 "$(id -u admin)" "admin uid"
assert_contains " $(id -nG admin) " " xlurm-admin " "admin in xlurm-admin"
assert_eq /home/alice "$(as_user alice sh -c 'echo $HOME')" "alice HOME"
assert_eq alice "$(as_user alice sh -c 'echo $USER')" "alice USER"

check "systemd is PID 1 and the system is running"
assert_eq systemd "$(cat /proc/1/comm)" "PID 1"
state=$(systemctl is-system-running || true)
note "is-system-running: $state (starting is expected: this runner is part of boot)"
assert_eq "" "$(systemctl --failed --plain --no-legend | grep -v xlurm-vm || true)" "no failed units"
