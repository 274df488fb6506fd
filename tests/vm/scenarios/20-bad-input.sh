#!/bin/bash
# Malformed calls to org.xlurm.Scheduler1 over the real system bus (busctl): each is
# answered with the expected named error (read from dbus-monitor, since busctl prints
# only the message), and afterwards the daemon still serves and nothing changed: the
# full job list (root, all users, finished too) and the set of xlurm-job units are the
# same as before. tests/security_bus.rs sends the same calls (and a 10 MiB argv) on a
# private bus.
# timeout: 240
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd

systemctl start xlurmd
D=(org.xlurm.Scheduler1 /org/xlurm/Scheduler1 org.xlurm.Scheduler1)
B=(busctl call --timeout=60 -- "${D[@]}")
E=org.xlurm.Scheduler1.Error
# A 5 MiB command line (40 x 128000 bytes) needs a larger stack limit for exec.
ulimit -s 65536

mon=/tmp/xlurm-20-errors.log
owner=$(busctl status org.xlurm.Scheduler1 2>/dev/null | sed -n 's/^UniqueName=//p')
[ -n "$owner" ] || owner=org.xlurm.Scheduler1
dbus-monitor --system "type='error',sender='$owner'" >"$mon" 2>&1 &
monpid=$!
trap 'kill $monpid 2>/dev/null || true' EXIT
n_err() { grep -c 'error_name=' "$mon" || true; }
# Wait until the monitor sees errors (GetJob 0 always fails).
for i in $(seq 100); do
    "${B[@]}" GetJob t 0 >/dev/null 2>&1 || true
    [ "$(n_err)" -gt 0 ] && break
    sleep 0.2
done
[ "$(n_err)" -gt 0 ] || fail "dbus-monitor never saw an error from $owner"

list_all() { "${B[@]}" ListJobs 'a{sv}' 2 all_users b true finished b true; }
units() { systemctl list-units --all --plain --no-legend 'xlurm-job-*' | awk '{print $1}' | sort; }
before_jobs=$(list_all)
before_units=$(units)
before_pid=$(systemctl show -p MainPID --value xlurmd)

count=0
# expect_err ERROR_NAME USER WHAT -- ARGS...: the call must fail with ERROR_NAME.
expect_err() {
    local want=$1 who=$2 what=$3 before rc=0 out got
    shift 4
    before=$(n_err)
    if [ "$who" = root ]; then
        out=$("${B[@]}" "$@" 2>&1) || rc=$?
    else
        out=$(as_user "$who" "${B[@]}" "$@" 2>&1) || rc=$?
    fi
    [ "$rc" != 0 ] || fail "$what: ACCEPTED (expected $want): ${out:0:300}"
    wait_for "[ \$(n_err) -gt $before ]" 15 0.05
    got=$(grep 'error_name=' "$mon" | tail -1 | sed 's/.*error_name=\([^ ]*\).*/\1/')
    [ "$got" = "$want" ] || fail "$what: got $got (${out:0:300}), expected $want"
    note "ok: $what -> ${got#org.}: ${out:0:160}"
    count=$((count + 1))
}
G=(argv as 1 /bin/true cwd s /)

check "Submit: wrong variant types, unknown and missing keys"
expect_err $E.InvalidArgs alice "cpus as a string" -- Submit 'a{sv}' 3 "${G[@]}" cpus s four
expect_err $E.InvalidArgs alice "cpus as int32 -1" -- Submit 'a{sv}' 3 "${G[@]}" cpus i -1
expect_err $E.InvalidArgs alice "mem as int64 -1" -- Submit 'a{sv}' 3 "${G[@]}" mem x -1
expect_err $E.InvalidArgs alice "argv as a string" -- Submit 'a{sv}' 2 argv s /bin/true cwd s /
expect_err $E.InvalidArgs alice "time_limit as a double" -- Submit 'a{sv}' 3 "${G[@]}" time_limit d 1.5
expect_err $E.InvalidArgs alice "cpus as a nested variant" -- Submit 'a{sv}' 3 "${G[@]}" cpus v u 1
expect_err $E.InvalidArgs alice "unknown key" -- Submit 'a{sv}' 3 "${G[@]}" bogus u 1
expect_err $E.InvalidArgs alice "key differing in case" -- Submit 'a{sv}' 3 "${G[@]}" Cpus u 1
expect_err $E.InvalidArgs alice "missing cwd" -- Submit 'a{sv}' 1 argv as 1 /bin/true
expect_err $E.InvalidArgs alice "missing argv" -- Submit 'a{sv}' 1 cwd s /
expect_err $E.InvalidArgs alice "empty spec" -- Submit 'a{sv}' 0

check "Submit: bad values"
expect_err $E.InvalidArgs alice "empty argv" -- Submit 'a{sv}' 2 argv as 0 cwd s /
expect_err $E.InvalidArgs alice "relative argv[0]" -- Submit 'a{sv}' 2 argv as 1 true cwd s /
expect_err $E.InvalidArgs alice "argv[0] component over 255 bytes" -- Submit 'a{sv}' 2 argv as 1 "/bin/$(printf 'x%.0s' $(seq 300))" cwd s /
expect_err $E.InvalidArgs alice "relative cwd" -- Submit 'a{sv}' 2 argv as 1 /bin/true cwd s tmp
expect_err $E.InvalidArgs alice "non-existent cwd" -- Submit 'a{sv}' 2 argv as 1 /bin/true cwd s /nonexistent/xlurm-20
expect_err $E.InvalidArgs alice "cwd is a file" -- Submit 'a{sv}' 2 argv as 1 /bin/true cwd s /etc/passwd
expect_err $E.InvalidArgs alice "env name with a dash" -- Submit 'a{sv}' 3 "${G[@]}" env as 1 A-B=1
expect_err $E.InvalidArgs alice "env name starting with a digit" -- Submit 'a{sv}' 3 "${G[@]}" env as 1 1A=x
expect_err $E.InvalidArgs alice "env without =" -- Submit 'a{sv}' 3 "${G[@]}" env as 1 NOEQUALS
expect_err $E.InvalidArgs alice "env with an empty name" -- Submit 'a{sv}' 3 "${G[@]}" env as 1 =x
expect_err $E.InvalidArgs alice "job name with a newline" -- Submit 'a{sv}' 3 "${G[@]}" name s $'a\nb'
expect_err $E.InvalidArgs alice "unknown vendor" -- Submit 'a{sv}' 4 "${G[@]}" gpus u 1 vendor s amd
big=$(head -c 128000 /dev/zero | tr '\0' x)
args=(); for i in $(seq 40); do args+=("$big"); done
expect_err $E.InvalidArgs alice "5 MiB argv" -- Submit 'a{sv}' 2 argv as 41 /bin/echo "${args[@]}" cwd s /
unset args big

check "Submit: absurd numbers and devices that do not exist"
expect_err $E.InvalidRequest alice "0 CPUs" -- Submit 'a{sv}' 3 "${G[@]}" cpus u 0
expect_err $E.InvalidRequest alice "4294967295 CPUs" -- Submit 'a{sv}' 3 "${G[@]}" cpus u 4294967295
expect_err $E.InvalidRequest alice "mem 0" -- Submit 'a{sv}' 3 "${G[@]}" mem t 0
expect_err $E.InvalidRequest alice "mem 2^64-1" -- Submit 'a{sv}' 3 "${G[@]}" mem t 18446744073709551615
expect_err $E.InvalidRequest alice "time_limit 0" -- Submit 'a{sv}' 3 "${G[@]}" time_limit t 0
expect_err $E.InvalidRequest alice "time_limit 2^64-1" -- Submit 'a{sv}' 3 "${G[@]}" time_limit t 18446744073709551615
expect_err $E.InvalidRequest alice "gpus on a machine without accelerators" -- Submit 'a{sv}' 3 "${G[@]}" gpus u 1
expect_err $E.InvalidRequest alice "unknown device IDs" -- Submit 'a{sv}' 3 "${G[@]}" device_ids au 2 7 9
expect_err $E.InvalidRequest alice "exclude without a count" -- Submit 'a{sv}' 3 "${G[@]}" exclude_device_ids au 1 0

check "SubmitMany: all or none"
expect_err $E.InvalidArgs alice "second spec malformed" -- SubmitMany 'aa{sv}' 2 2 "${G[@]}" 1 cpus u 1
expect_err $E.InvalidRequest alice "second spec impossible" -- SubmitMany 'aa{sv}' 2 2 "${G[@]}" 3 "${G[@]}" cpus u 0

check "Wrong signatures and unknown methods"
SIG=org.freedesktop.DBus.Error.InvalidArgs
expect_err $SIG alice "Submit with a string" -- Submit s /bin/true
expect_err $SIG alice "Submit with nothing" -- Submit
expect_err $SIG alice "SubmitMany with one a{sv}" -- SubmitMany 'a{sv}' 0
expect_err $SIG alice "Cancel with a string" -- Cancel s 1
expect_err $SIG alice "GetJob with an int32" -- GetJob i -1
expect_err $SIG root "SetMaxRunning with an int64" -- SetMaxRunning x -1
expect_err $SIG alice "ListJobs with a u" -- ListJobs u 1
expect_err org.freedesktop.DBus.Error.UnknownMethod alice "unknown method" -- Frobnicate

check "Jobs that do not exist, filters and admin calls with junk"
expect_err $E.NoSuchJob alice "Cancel 0" -- Cancel t 0
expect_err $E.NoSuchJob alice "Cancel 2^64-1" -- Cancel t 18446744073709551615
expect_err $E.NoSuchJob alice "GetJob 0" -- GetJob t 0
expect_err $E.NoSuchJob alice "GetJob 2^64-1" -- GetJob t 18446744073709551615
expect_err $E.NoSuchJob alice "ReadLog of job 0" -- ReadLog tsu 0 "" 10
expect_err $E.InvalidArgs alice "ReadLog with a 5000-byte cursor" -- ReadLog tsu 0 "$(head -c 5000 /dev/zero | tr '\0' c)" 10
expect_err $E.InvalidArgs alice "unknown filter key" -- ListJobs 'a{sv}' 1 bogus b true
expect_err $E.InvalidArgs alice "unknown state" -- ListJobs 'a{sv}' 1 states as 1 SLEEPING
expect_err $E.InvalidArgs alice "states as a string" -- ListJobs 'a{sv}' 1 states s RUNNING
expect_err $E.InvalidArgs alice "all_users as a string" -- ListJobs 'a{sv}' 1 all_users s yes
expect_err $E.InvalidArgs alice "limit as int32" -- ListJobs 'a{sv}' 1 limit i -1
expect_err $E.InvalidArgs alice "before as a uint32" -- ListJobs 'a{sv}' 1 before u 5
expect_err $E.InvalidArgs alice "by descriptor: unknown filter key" -- ListJobsByFileDescriptor 'a{sv}' 1 bogus b true
expect_err $E.InvalidArgs root "SetPolicy junk" -- SetPolicy s 'fifo; rm -rf /'
expect_err $E.InvalidArgs root "SetPolicy empty" -- SetPolicy s ''
expect_err $E.InvalidArgs root "SetMaxRunning 0" -- SetMaxRunning u 0
expect_err $E.InvalidArgs root "SetDevicesDisabled without IDs" -- SetDevicesDisabled saub nv 0 true
expect_err $E.InvalidArgs root "SetDevicesDisabled unknown vendor" -- SetDevicesDisabled saub amd 1 0 true
expect_err $E.InvalidArgs root "SetDevicesDisabled device that does not exist" -- SetDevicesDisabled saub nv 1 0 true

check "afterwards: the daemon serves and nothing changed ($count refused calls)"
[ "$count" -ge 30 ] || fail "only $count malformed calls were made"
assert_ok "${B[@]}" GetMachine
assert_eq easy-backfill "$(busctl get-property "${D[@]}" Policy | awk '{print $2}' | tr -d '"')" "policy unchanged"
assert_eq 32 "$(busctl get-property "${D[@]}" MaxRunning | awk '{print $2}')" "max-running unchanged"
assert_eq "$before_jobs" "$(list_all)" "ListJobs (root, all users, finished) unchanged"
assert_eq "$before_units" "$(units)" "no xlurm-job unit appeared"
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd still active"
assert_eq "$before_pid" "$(systemctl show -p MainPID --value xlurmd)" "same xlurmd process (no crash, no restart)"
