#!/bin/bash
# Forged systemd signals (issue 16, item 1). Any user may address a signal to xlurmd's
# unique name and the bus delivers it whatever xlurmd's match rules say. bob sends the two
# PropertiesChanged signals systemd sends when a unit ends ("success, exit 0, active/exited")
# for alice's running job: to xlurmd's unique name and broadcast, with busctl and with a
# raw client. The job stays RUNNING with its process alive. Then a flood of 10,000 forged
# signals of the shape that makes a listener read the unit (inactive, nothing queued) for
# her other job: xlurmd keeps answering, both jobs run on, and xlurmd's calls to systemd
# during the flood are no more than in a quiet window of the same length (dbus-monitor).
# timeout: 300
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd
[ -x "$XLURM_VM_SRC/fakes/forge_signals" ] \
    || fail "missing fakes/forge_signals (built on the host by tests/vm/run: is cc there?)"
forge=/tmp/xlurm-23-forge
install -m 755 "$XLURM_VM_SRC/fakes/forge_signals" "$forge"

systemctl start xlurmd
mon=/tmp/xlurm-23-calls.log
cleanup() {
    kill "${monpid:-0}" 2>/dev/null || true
    for id in ${a:-} ${b:-}; do as_user alice xcancel "$id" >/dev/null 2>&1 || true; done
    rm -f "$forge"
}
trap cleanup EXIT
main_pid() { systemctl show -p MainPID --value "xlurm-job-$1.service"; }
restarts0=$(systemctl show -p NRestarts --value xlurmd)
owner=$(xlurmd_owner)
[ -n "$owner" ] || fail "xlurmd has no unique name on the bus"
note "xlurmd is $owner"

submit() {
    as_user alice "${XB[@]}" Submit 'a{sv}' 3 argv as 2 /bin/sleep 1000 cwd s /home/alice \
        name s "$1" | awk '{print $2}'
}
check "alice runs two jobs"
a=$(submit xlurm-23-a)
b=$(submit xlurm-23-b)
wait_for "[ \"\$(job_state $a)\" = RUNNING ] && [ \"\$(job_state $b)\" = RUNNING ]" 60
pid_a=$(main_pid "$a")
pid_b=$(main_pid "$b")
[ "$pid_a" -gt 0 ] && [ "$pid_b" -gt 0 ] || fail "no main PIDs ($pid_a, $pid_b)"
note "jobs $a (pid $pid_a) and $b (pid $pid_b)"

unit_path() { echo "/org/freedesktop/systemd1/unit/xlurm_2djob_2d$1_2eservice"; }
# forge_end JOB [busctl emit options]: bob claims JOB's unit ended with exit 0.
forge_end() {
    local path
    path=$(unit_path "$1")
    shift
    as_user bob busctl emit "$@" "$path" org.freedesktop.DBus.Properties PropertiesChanged \
        'sa{sv}as' org.freedesktop.systemd1.Service 3 Result s success ExecMainCode i 1 \
        ExecMainStatus i 0 0
    as_user bob busctl emit "$@" "$path" org.freedesktop.DBus.Properties PropertiesChanged \
        'sa{sv}as' org.freedesktop.systemd1.Unit 4 ActiveState s active SubState s exited \
        InvocationID ay 0 Job '(uo)' 0 / 0
}

check "bob forges the end of alice's job $a: to xlurmd's unique name, and broadcast"
forge_end "$a" --destination="$owner"
forge_end "$a"
as_user bob "$forge" "$owner" "$a" 3 end
as_user bob "$forge" - "$a" 3 end
sleep 3
assert_eq RUNNING "$(job_state "$a")" "alice's job is still RUNNING"
assert_eq active "$(systemctl is-active "xlurm-job-$a.service")" "its unit still runs"
assert_ok kill -0 "$pid_a"
assert_eq "$pid_a" "$(main_pid "$a")" "the same process"
wait_for "journalctl -u xlurmd -o cat | grep -q 'not sent by systemd'" 30
note "xlurmd logged: $(journalctl -u xlurmd -o cat | grep 'not sent by systemd' | tail -1)"

# Method calls xlurmd makes to systemd, one line each, with their time.
dbus-monitor --system "type='method_call',sender='$owner'" >"$mon" 2>&1 &
monpid=$!
wait_for "[ -s $mon ]" 15
calls_between() {   # calls_between T0 T1: calls to systemd with T0 <= time < T1
    grep '^method call' "$mon" | grep 'destination=org.freedesktop.systemd1' \
        | sed 's/.*time=\([0-9.]*\).*/\1/' | awk -v a="$1" -v b="$2" '$1 >= a && $1 < b' | wc -l
}
window=20
probe() {   # alice's xqueue answers within 15 s, several times over the window
    local i t
    for i in 1 2 3; do
        t=$(date +%s.%N)
        timeout 15 setpriv --reuid=alice --regid=alice --init-groups --reset-env \
            env LANG=C.UTF-8 xqueue >/dev/null || fail "xqueue did not answer within 15 s"
        note "xqueue answered in $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}') s"
        sleep 2
    done
}

check "a quiet window of ${window}s: what xlurmd asks of systemd on its own"
q0=$(date +%s.%N)
probe
q1=$(awk -v a="$q0" -v w="$window" 'BEGIN{printf "%.6f", a+w}')
sleep "$(awk -v n="$(date +%s.%N)" -v e="$q1" 'BEGIN{d=e-n; printf "%.3f", (d > 0 ? d : 0)}')"
quiet=$(calls_between "$q0" "$q1")
note "quiet: $quiet calls to systemd in $(awk -v a="$q0" -v b="$q1" 'BEGIN{printf "%.1f", b-a}') s"

check "bob floods xlurmd with 10,000 forged signals about job $b"
f0=$(date +%s.%N)
as_user bob "$forge" "$owner" "$b" 10000 inactive &
fpid=$!
probe
wait "$fpid" || fail "the flood could not be sent"
note "flood sent after $(awk -v a="$f0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s"
now=$(date +%s.%N)
end=$(awk -v a="$f0" -v w="$window" 'BEGIN{printf "%.6f", a+w}')
awk -v n="$now" -v e="$end" 'BEGIN{exit !(n < e)}' || fail "the flood took longer than the ${window}s window"
sleep "$(awk -v n="$now" -v e="$end" 'BEGIN{printf "%.3f", e-n}')"
flood=$(calls_between "$f0" "$end")
note "flood: $flood calls to systemd in ${window} s (quiet: $quiet)"
[ "$flood" -le $(( quiet + 2 )) ] \
    || fail "the flood made xlurmd call systemd: $flood calls against $quiet in a quiet window"
note "ok: PID 1's call count stayed flat"

check "after the flood: xlurmd still serves, both jobs run on"
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd active"
assert_eq "$restarts0" "$(systemctl show -p NRestarts --value xlurmd)" "xlurmd not restarted"
assert_eq "$owner" "$(xlurmd_owner)" \
    "xlurmd still owns its name"
for id in "$a" "$b"; do
    assert_eq RUNNING "$(job_state "$id")" "job $id RUNNING"
done
assert_ok kill -0 "$pid_a"
assert_ok kill -0 "$pid_b"

check "systemd's own word still counts: alice cancels, and a new job completes"
as_user alice xcancel "$a" "$b"
wait_for "[ \"\$(job_state $a)\" = CANCELLED ] && [ \"\$(job_state $b)\" = CANCELLED ]" 60
! kill -0 "$pid_a" 2>/dev/null || fail "job $a's process outlived its cancel"
c=$(as_user alice "${XB[@]}" Submit 'a{sv}' 3 argv as 1 /bin/true cwd s /home/alice \
    name s xlurm-23-c | awk '{print $2}')
wait_for "[ \"\$(job_state $c)\" = COMPLETED ]" 60
note "ok: job $c COMPLETED"
