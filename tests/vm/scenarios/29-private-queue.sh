#!/bin/bash
# A private queue (issue 16, item 6). With `xlurmd --list-is-public=false`, nothing of
# alice's job, not even that it exists, reaches bob: not through xqueue (which shows
# bob his own jobs instead of failing), busctl introspect/tree, busctl get-property on
# the job's path, GetJob, xcancel, xlurm log, nor a monitor of the bus while her jobs
# change state. Every refusal is the very answer a job that does not exist gets. alice
# still sees and follows her own jobs, and her xrun is told of its job's changes by
# unicast signals (read with root's dbus-monitor). Root sees everything.
# timeout: 300
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd

dropin_dir=/run/systemd/system/xlurmd.service.d
dropin=$dropin_dir/29-private.conf
mon=/tmp/xlurm-29-bob-monitor.log
rootmon=/tmp/xlurm-29-root-monitor.log
cleanup() {
    for pid in ${bobmon:-} ${bobmon2:-} ${rootmonpid:-}; do kill "$pid" 2>/dev/null || true; done
    for id in ${a:-} ${b:-} ${bobjob:-}; do "${XB[@]}" Cancel t "$id" >/dev/null 2>&1 || true; done
    rm -f "$dropin" "$mon" "$mon.busctl" "$rootmon"
    systemctl daemon-reload
    systemctl reset-failed xlurmd 2>/dev/null || true
    systemctl restart xlurmd
}
trap cleanup EXIT

check "xlurmd with a private queue (--list-is-public=false, drop-in)"
mkdir -p "$dropin_dir"
printf '%s\n' "# tests/vm/scenarios/29-private-queue.sh (removed at its end)" "[Service]" \
    "ExecStart=" "ExecStart=/usr/bin/xlurmd --list-is-public=false" >"$dropin"
systemctl daemon-reload
systemctl reset-failed xlurmd 2>/dev/null || true
systemctl restart xlurmd
systemctl show -p ExecStart --value xlurmd | grep -q -- '--list-is-public=false' \
    || fail "the drop-in did not take"

# bob listens to everything xlurmd broadcasts from before alice's jobs exist.
as_user bob dbus-monitor --system "type='signal',sender='org.xlurm.Scheduler1'" >"$mon" 2>&1 &
bobmon=$!
as_user bob busctl --system monitor org.xlurm.Scheduler1 >"$mon.busctl" 2>&1 &
bobmon2=$!
sleep 1

check "alice runs two jobs"
a=$(as_user alice "${XB[@]}" Submit 'a{sv}' 3 argv as 2 /bin/sleep 1000 cwd s /home/alice \
    name s alice-secret-29 | awk '{print $2}')
b=$(as_user alice "${XB[@]}" Submit 'a{sv}' 3 argv as 2 /bin/sleep 1000 cwd s /home/alice \
    name s alice-secret-29b | awk '{print $2}')
wait_for "[ \"\$(job_state $a)\" = RUNNING ]" 60
note "alice's jobs: $a (running) and $b"
none=$((b + 100000))

check "bob's xqueue works and shows his jobs only"
bobjob=$(as_user bob "${XB[@]}" Submit 'a{sv}' 3 argv as 2 /bin/sleep 1000 cwd s /home/bob \
    name s bob-own-29 | awk '{print $2}')
for args in "" "--all" "--json"; do
    # shellcheck disable=SC2086
    q=$(as_user bob xqueue $args 2>&1) || fail "bob's xqueue $args failed: $q"
    assert_contains "$q" bob-own-29
    assert_not_contains "$q" alice-secret-29 "bob's xqueue $args"
    assert_not_contains "$q" alice "bob's xqueue $args"
done
q=$(as_user alice xqueue 2>&1)
assert_contains "$q" alice-secret-29
assert_not_contains "$q" bob-own-29 "alice's xqueue"
q=$(xqueue --all 2>&1)
assert_contains "$q" alice-secret-29
assert_contains "$q" bob-own-29

check "bob finds no job objects to introspect or read"
for path in /org/xlurm/Scheduler1 /org/xlurm/Scheduler1/job; do
    intro=$(as_user bob busctl --system --xml-interface introspect org.xlurm.Scheduler1 "$path" 2>&1 || true)
    echo "$intro" | grep -E 'node name|Unknown' || true
    assert_not_contains "$intro" "<node name=" "introspection of $path"
done
tree=$(as_user bob busctl --system tree org.xlurm.Scheduler1 2>&1 || true)
echo "$tree"
assert_not_contains "$tree" "/job/" "busctl tree"
# same_refusal WHAT 'COMMAND with @ID@': bob's answer about alice's job $a is word for
# word the answer about job $none, which does not exist (IDs replaced by N).
xb="${XB[*]}"
same_refusal() {
    local what=$1 real fake
    real=$(as_user_sh bob "${2//@ID@/$a} 2>&1" | sed "s#job $a\b#job N#g; s#/job/$a\b#/job/N#g" || true)
    fake=$(as_user_sh bob "${2//@ID@/$none} 2>&1" | sed "s#job $none\b#job N#g; s#/job/$none\b#/job/N#g" || true)
    note "$what: $real"
    [ -n "$real" ] || fail "$what: no answer at all"
    assert_eq "$fake" "$real" "$what of alice's job and of no job"
    assert_not_contains "$real" alice "$what"
}
same_refusal "get-property State" \
    "busctl --system get-property org.xlurm.Scheduler1 /org/xlurm/Scheduler1/job/@ID@ org.xlurm.Job1 State"
same_refusal "introspect the job's path" \
    "busctl --system introspect org.xlurm.Scheduler1 /org/xlurm/Scheduler1/job/@ID@"
same_refusal GetJob "$xb GetJob t @ID@"
same_refusal ReadLog "$xb ReadLog tsu @ID@ '' 10"
same_refusal Cancel "$xb Cancel t @ID@"
same_refusal "xqueue ID" "xqueue @ID@"
same_refusal xcancel "xcancel @ID@"
same_refusal "xlurm log" "xlurm log @ID@"
[ "$(job_state "$a")" = RUNNING ] || fail "alice's job $a is no longer running"
m=$(as_user bob "${XB[@]}" GetMachine 2>&1)
assert_not_contains "$m" "\"job\" t $a" "GetMachine as bob"

check "alice's xrun is told of its job's changes by unicast signals; root watches"
# Room for it (the VM has two CPUs).
as_user alice xcancel "$b" >/dev/null
as_user bob xcancel "$bobjob" >/dev/null
wait_for "[ \"\$(job_state $b)\" = CANCELLED ] && [ \"\$(job_state $bobjob)\" = CANCELLED ]" 60
dbus-monitor --system "type='signal',sender='org.xlurm.Scheduler1',member='JobStateChanged'" \
    >"$rootmon" 2>&1 &
rootmonpid=$!
sleep 1
out=$(as_user alice timeout 120 xrun -n alice-secret-29c /bin/sh -c 'echo hello-29; exit 3' 2>&1) && rc=0 || rc=$?
echo "$out"
assert_eq 3 "$rc" "alice's xrun exit code"
assert_contains "$out" hello-29
c=$(echo "$out" | grep -o 'job [0-9]*' | head -1 | awk '{print $2}')
[ -n "$c" ] || fail "no job id in xrun's output"
sleep 1
kill "$rootmonpid" 2>/dev/null || true
rootmonpid=
sigs=$(grep -A2 '^signal' "$rootmon" | grep -B2 "uint64 $c\$" | grep '^signal' || true)
echo "$sigs"
[ -n "$sigs" ] || fail "no JobStateChanged for alice's xrun job $c"
if echo "$sigs" | grep -q 'destination=(null'; then
    fail "a JobStateChanged for job $c was broadcast"
fi
note "$(echo "$sigs" | wc -l) unicast signals for job $c"

check "bob's monitors heard nothing of alice's jobs"
"${XB[@]}" Cancel t "$a" >/dev/null
wait_for "[ \"\$(job_state $a)\" = CANCELLED ]" 60
sleep 1
kill "$bobmon" "$bobmon2" 2>/dev/null || true
bobmon= bobmon2=
note "bob's dbus-monitor: $(wc -l <"$mon") lines; busctl monitor: $(head -c 300 "$mon.busctl" | tr '\n' ' ')"
for id in "$a" "$b" "$c"; do
    if grep -q "uint64 $id\$" "$mon"; then
        grep -B3 "uint64 $id\$" "$mon" | head -20
        fail "bob heard of alice's job $id"
    fi
    if grep -q "/job/$id\b" "$mon.busctl"; then
        fail "bob's busctl monitor saw job $id"
    fi
done
assert_not_contains "$(cat "$mon" "$mon.busctl")" alice "bob's monitors"
