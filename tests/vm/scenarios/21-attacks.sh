#!/bin/bash
# Attacks by ordinary users against each other, the admin and root, each checked for
# the refusal AND for nothing having changed: alice cannot read bob's command, env,
# cwd or output, cannot cancel his job, cannot change policy/limits/devices (polkit),
# cannot run as anyone else (spec keys user/uid/unit/slice... are refused), her job
# runs as her with NoNewPrivileges (a setuid-root binary gains nothing), cannot open a
# block device (DevicePolicy=closed of xlurm-nodev.slice, where jobs without
# accelerators run: EPERM even with a 0666 node), cannot leave its
# cgroup, ends at its time limit and dies whole on cancel. The admin (group
# xlurm-admin, granted by the example polkit rule) may do the admin actions; root may
# do all. State files are root-only and a started job's environment leaves the disk.
# bob cannot learn what alice's 0700 directory holds from the answer to a submission
# into it (the working directory is checked with his rights, not root's).
# timeout: 300
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd

systemctl start xlurmd
D=(org.xlurm.Scheduler1 /org/xlurm/Scheduler1 org.xlurm.Scheduler1)
B=(busctl call --timeout=60 -- "${D[@]}")
E=org.xlurm.Scheduler1.Error
suid=/usr/local/bin/xlurm-21-suid-id
blk=/dev/xlurm-21-blk
cleanup() {
    kill "${monpid:-0}" 2>/dev/null || true
    rm -f "$suid" "$blk" /etc/polkit-1/rules.d/50-xlurm-admin.rules
    [ -z "${home_mode:-}" ] || chmod "$home_mode" /home/alice
    rm -rf /home/alice/xlurm-21-closed
    for u in $(systemctl list-units --all --plain --no-legend 'xlurm-job-*' | awk '{print $1}'); do
        case $(systemctl show -p Description --value "$u") in *xlurm-21*) forget_unit "$u" ;; esac
    done
}
trap cleanup EXIT

mon=/tmp/xlurm-21-errors.log
owner=$(busctl status org.xlurm.Scheduler1 2>/dev/null | sed -n 's/^UniqueName=//p')
[ -n "$owner" ] || owner=org.xlurm.Scheduler1
dbus-monitor --system "type='error',sender='$owner'" >"$mon" 2>&1 &
monpid=$!
n_err() { grep -c 'error_name=' "$mon" || true; }
for i in $(seq 100); do
    "${B[@]}" GetJob t 0 >/dev/null 2>&1 || true
    [ "$(n_err)" -gt 0 ] && break
    sleep 0.2
done
[ "$(n_err)" -gt 0 ] || fail "dbus-monitor never saw an error from $owner"
# expect_err ERROR_NAME USER WHAT -- ARGS...
expect_err() {
    local want=$1 who=$2 what=$3 before rc=0 out got
    shift 4
    before=$(n_err)
    if [ "$who" = root ]; then out=$("${B[@]}" "$@" 2>&1) || rc=$?
    else out=$(as_user "$who" "${B[@]}" "$@" 2>&1) || rc=$?; fi
    [ "$rc" != 0 ] || fail "$what: ACCEPTED (expected $want): ${out:0:300}"
    wait_for "[ \$(n_err) -gt $before ]" 15 0.05
    got=$(grep 'error_name=' "$mon" | tail -1 | sed 's/.*error_name=\([^ ]*\).*/\1/')
    [ "$got" = "$want" ] || fail "$what: got $got (${out:0:300}), expected $want"
    note "ok: $what -> ${got##*.}: ${out:0:160}"
}
state_of() { "${B[@]}" GetJob t "$1" | grep -o '"state" s "[A-Z_]*"' | awk '{print $3}' | tr -d '"'; }
wait_state() { wait_for "[ \"\$(state_of $1)\" = $2 ]" "${3:-60}"; }
prop() { busctl get-property "${D[@]}" "$1" | awk '{print $2}' | tr -d '"'; }
list_all() { "${B[@]}" ListJobs 'a{sv}' 2 all_users b true finished b true; }

check "bob queues a job with a secret argument, environment and directory"
out=$(as_user bob "${B[@]}" Submit 'a{sv}' 5 argv as 4 /bin/bash -c 'sleep 1000' bob-secret-arg-4711 \
    env as 1 BOB_SECRET=hunter2-4711 cwd s /home/bob time_limit t 600 name s xlurm-21-bob)
bid=$(echo "$out" | awk '{print $2}')
note "bob's job: $bid"
wait_state "$bid" RUNNING
unit=xlurm-job-$bid.service
assert_eq active "$(systemctl is-active "$unit")" "bob's unit runs"
# By number, as the bus identified him (issue 16 item 8), and so it runs as bob.
assert_eq "$(id -u bob)" "$(unit_prop "$unit" User)" "bob's unit's User= is his uid"
assert_eq bob "$(ps -o user= -p "$(unit_prop "$unit" MainPID)" | tr -d ' ')" "bob's unit runs as bob"

check "alice sees the summary of bob's job but never its command, env, cwd or output"
q=$(as_user alice xqueue "$bid" 2>&1); echo "$q"
assert_contains "$q" "xlurm-21-bob" "name visible"
for secret in bob-secret-arg-4711 hunter2 /home/bob Command WorkDir; do
    assert_not_contains "$q" "$secret" "xqueue $bid as alice"
done
g=$(as_user alice "${B[@]}" GetJob t "$bid")
for key in '"argv"' '"env"' '"cwd"' '"batch"' bob-secret-arg-4711 hunter2; do
    assert_not_contains "$g" "$key" "GetJob $bid as alice"
done
assert_contains "$g" '"user" s "bob"' "owner in the summary"
l=$(as_user alice xqueue 2>&1); echo "$l"
assert_contains "$l" "$bid" "bob's job listed for alice"
assert_not_contains "$l" bob-secret-arg-4711 "xqueue list as alice"
assert_not_contains "$(as_user alice "${B[@]}" ListJobs 'a{sv}' 2 all_users b true finished b true)" \
    bob-secret-arg-4711 "ListJobs as alice"
expect_err $E.PermissionDenied alice "ReadLog of bob's job" -- ReadLog tsu "$bid" "" 100
rg=$("${B[@]}" GetJob t "$bid")
assert_contains "$rg" bob-secret-arg-4711 "root sees the command (the check above means something)"
assert_not_contains "$rg" hunter2 "the started job's environment is gone even for root"

check "alice cannot cancel bob's job"
expect_err $E.PermissionDenied alice "Cancel bob's job" -- Cancel t "$bid"
rc=0; out=$(as_user alice xcancel "$bid" 2>&1) || rc=$?
assert_ne 0 "$rc" "xcancel as alice fails: $out"
assert_eq RUNNING "$(state_of "$bid")" "bob's job still running"
assert_eq active "$(systemctl is-active "$unit")" "bob's unit still active"

check "alice cannot change the policy, max-running or devices (polkit)"
expect_err $E.PermissionDenied alice "SetPolicy" -- SetPolicy s fifo-strict
expect_err $E.PermissionDenied alice "SetMaxRunning" -- SetMaxRunning u 1
expect_err $E.PermissionDenied alice "SetDevicesDisabled" -- SetDevicesDisabled saub nv 1 0 true
rc=0; out=$(as_user alice xlurm max-running 1 2>&1) || rc=$?
assert_ne 0 "$rc" "xlurm max-running as alice fails: $out"
assert_eq easy-backfill "$(prop Policy)" "policy unchanged"
assert_eq 32 "$(prop MaxRunning)" "max-running unchanged"

check "alice cannot pick the user, unit, slice or properties of her job"
before=$(list_all)
for kv in "user s bob" "user s root" "User s root" "uid u 0" "gid u 0" "group s root" \
          "unit s sshd.service" "slice s -.slice" "Slice s system.slice" \
          "NoNewPrivileges b false" "properties s User=root" "owner u 1002"; do
    # shellcheck disable=SC2086
    expect_err $E.InvalidArgs alice "spec key ${kv%% *}" -- Submit 'a{sv}' 3 argv as 1 /bin/true cwd s /home/alice $kv
done
assert_eq "$before" "$(list_all)" "nothing queued"

check "bob learns nothing of what alice's closed directory holds (working directories are checked with the submitter's rights)"
# Issue 16 item 7: xlurmd used to stat the working directory as root, so bob's
# submission into .../secret was queued while .../nothere was "does not exist".
closed=/home/alice/xlurm-21-closed
home_mode=$(stat -c %a /home/alice)
rm -rf "$closed"
as_user alice mkdir -m 0700 "$closed"
as_user alice mkdir "$closed/secret"
# Only search on alice's home: the 0700 directory is what closes the path.
chmod 0711 /home/alice
n_jobs() { list_all | awk '{print $2}'; }
before=$(n_jobs)
cwd_submit() { as_user "$1" "${B[@]}" Submit 'a{sv}' 4 argv as 1 /bin/true cwd s "$2" \
    name s xlurm-21-cwd time_limit t 60 2>&1; }
expect_err $E.InvalidArgs bob "Submit into alice's closed $closed/secret" -- \
    Submit 'a{sv}' 3 argv as 1 /bin/true cwd s "$closed/secret" name s xlurm-21-cwd
expect_err $E.InvalidArgs bob "Submit into alice's closed $closed/nothere" -- \
    Submit 'a{sv}' 3 argv as 1 /bin/true cwd s "$closed/nothere" name s xlurm-21-cwd
rc=0; secret_out=$(cwd_submit bob "$closed/secret") || rc=$?
assert_ne 0 "$rc" "bob's submission into $closed/secret is refused: $secret_out"
rc=0; nothere_out=$(cwd_submit bob "$closed/nothere") || rc=$?
assert_ne 0 "$rc" "bob's submission into $closed/nothere is refused: $nothere_out"
note "bob, existing:     $secret_out"
note "bob, not existing: $nothere_out"
assert_eq "${secret_out//$closed\/secret/DIR}" "${nothere_out//$closed\/nothere/DIR}" \
    "bob's two refusals, apart from the path"
assert_contains "$secret_out" "is not accessible to you (permission denied)" "bob's refusal"
assert_eq "$before" "$(n_jobs)" "nothing queued for bob (jobs known, finished ones too)"
# Controls: alice (after bob, on the same checking threads) and root see into it.
rc=0; out=$(cwd_submit alice "$closed/nothere") || rc=$?
assert_ne 0 "$rc" "alice's submission into $closed/nothere: $out"
assert_contains "$out" "does not exist" "alice hears that it does not exist"
out=$(cwd_submit alice "$closed/secret"); acwd=$(echo "$out" | awk '{print $2}')
out=$("${B[@]}" Submit 'a{sv}' 4 argv as 1 /bin/true cwd s "$closed/secret" name s xlurm-21-cwd \
    time_limit t 60); rcwd=$(echo "$out" | awk '{print $2}')
wait_state "$acwd" COMPLETED
wait_state "$rcwd" COMPLETED
note "ok: alice's job $acwd and root's job $rcwd ran in $closed/secret"
chmod "$home_mode" /home/alice
rm -rf "$closed"

check "alice's job runs as alice, with NoNewPrivileges, no capabilities, in its own cgroup"
install -m 4755 -o root /usr/bin/id "$suid"
assert_eq 0 "$(as_user alice "$suid" -u)" "control: outside xlurm the setuid copy of id gives euid 0"
maj=$((16#$(stat -c %t /dev/vda))); min=$((16#$(stat -c %T /dev/vda)))
mknod -m 0666 "$blk" b "$maj" "$min"
assert_ok as_user alice head -c1 "$blk" >/dev/null
note "control: outside xlurm alice can read the 0666 node of /dev/vda ($maj:$min)"
rm -f /home/alice/xlurm-21.out
# A batch script (not an xrun argument: systemd would expand $$ and $NAME in those).
out=$(as_user alice xbatch -t 60 -n xlurm-21-probe --wrap "exec >~/xlurm-21.out 2>&1
    echo uid=\$(id -u) gid=\$(id -g) groups=\$(id -G)
    echo suid_euid=\$($suid -u)
    grep -E '^(NoNewPrivs|CapEff|CapPrm|CapAmb):' /proc/self/status
    timeout 5 head -c1 $blk >/dev/null; echo head_rc=\$?
    echo cgroup=\$(cat /proc/self/cgroup)
    echo \$\$ > /sys/fs/cgroup/cgroup.procs; echo escape_root_rc=\$?
    echo \$\$ > /sys/fs/cgroup/xlurm.slice/cgroup.procs; echo escape_slice_rc=\$?
    echo cgroup_after=\$(cat /proc/self/cgroup)" 2>&1)
pid_job=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
wait_for "case \$(state_of $pid_job) in PENDING|RUNNING) false;; *) true;; esac" 90
note "probe job $pid_job ended $(state_of "$pid_job")"
out=$(cat /home/alice/xlurm-21.out); echo "$out"
assert_contains "$out" "uid=1001 gid=1001 groups=1001" "runs as alice with her groups only"
assert_contains "$out" "suid_euid=1001" "setuid-root binary gains nothing (NoNewPrivileges)"
assert_contains "$out" "$(printf 'NoNewPrivs:\t1')" "NoNewPrivs is 1"
assert_contains "$out" "$(printf 'CapEff:\t0000000000000000')" "no effective capabilities"
assert_contains "$out" "$(printf 'CapAmb:\t0000000000000000')" "no ambient capabilities"
assert_contains "$out" "Operation not permitted" "block device open is EPERM (xlurm-nodev.slice's DevicePolicy=closed)"
assert_contains "$out" "head_rc=1" "block device read failed"
assert_contains "$out" "cgroup=0::/xlurm.slice/xlurm-nodev.slice/xlurm-job-" "job in its unit's cgroup"
assert_not_contains "$out" "escape_root_rc=0" "cannot move itself to the root cgroup"
assert_not_contains "$out" "escape_slice_rc=0" "cannot move itself to xlurm.slice"
cg=$(echo "$out" | sed -n 's/^cgroup=//p'); cga=$(echo "$out" | sed -n 's/^cgroup_after=//p')
assert_eq "$cg" "$cga" "still in its unit's cgroup"

check "alice's job ends at its time limit"
rc=0; as_user alice xrun -t 3 /bin/sleep 60 >/dev/null 2>&1 || rc=$?
assert_eq 124 "$rc" "TIMEOUT exit code"

check "cancelling alice's job kills a setsid and a double-forked grandchild"
out=$(as_user alice xbatch -t 300 -n xlurm-21-escape --wrap 'setsid sleep 2101 & (sleep 2102 &); sleep 2103' 2>&1)
aid=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
wait_state "$aid" RUNNING
wait_for "pgrep -u alice -f 'sleep 210[12]' >/dev/null" 30
assert_ok as_user alice xcancel "$aid"
wait_state "$aid" CANCELLED
wait_for "! pgrep -u alice -f 'sleep 210[123]' >/dev/null" 30
note "ok: no process of the job survived"

check "state files: root-only directory, log and script snapshots"
assert_eq "700 root" "$(stat -c '%a %U' /var/lib/xlurm)" "/var/lib/xlurm"
assert_eq "600 root" "$(stat -c '%a %U' /var/lib/xlurm/jobs.log)" "jobs.log"
out=$(as_user alice xbatch -t 300 -n xlurm-21-snap --wrap 'sleep 1000' 2>&1)
sid=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
wait_state "$sid" RUNNING
assert_eq "700 root" "$(stat -c '%a %U' /var/lib/xlurm/scripts)" "scripts dir"
assert_eq "600 root" "$(stat -c '%a %U' /var/lib/xlurm/scripts/$sid)" "script snapshot"
assert_fails as_user alice cat /var/lib/xlurm/jobs.log
assert_fails as_user alice cat "/var/lib/xlurm/scripts/$sid"
for f in /var/lib/xlurm/*; do
    case $(stat -c %a "$f") in 600|700) ;; *) fail "$f is $(stat -c %a "$f"), not root-only" ;; esac
done

check "the admin (xlurm-admin, example polkit rule) may do admin actions"
ls /etc/polkit-1/rules.d/
[ -e /etc/polkit-1/rules.d/50-xlurm-admin.rules ] \
    && note "the rule was installed by guest-install" \
    || note "guest-install does not pick up packaging/polkit/50-xlurm-admin.rules.example (name ends .example): installing it as the README says"
install -m 0644 packaging/polkit/50-xlurm-admin.rules.example /etc/polkit-1/rules.d/50-xlurm-admin.rules
wait_for "as_user admin ${B[*]} SetMaxRunning u 31 >/dev/null 2>&1" 30 1
assert_eq 31 "$(prop MaxRunning)" "admin set max-running"
assert_ok as_user admin "${B[@]}" SetPolicy s fifo-strict
assert_eq fifo-strict "$(prop Policy)" "admin set the policy"
expect_err $E.InvalidArgs admin "SetDevicesDisabled passes polkit, then the device does not exist" -- SetDevicesDisabled saub nv 1 0 true
expect_err $E.PermissionDenied bob "bob is still refused" -- SetMaxRunning u 1
ag=$(as_user admin "${B[@]}" GetJob t "$bid")
assert_not_contains "$ag" bob-secret-arg-4711 "the admin does not see bob's command"
expect_err $E.PermissionDenied admin "ReadLog of bob's job" -- ReadLog tsu "$bid" "" 100
assert_ok as_user admin "${B[@]}" Cancel t "$bid"
wait_state "$bid" CANCELLED
note "ok: the admin cancelled bob's job"

check "root may do everything"
assert_ok "${B[@]}" SetPolicy s easy-backfill
assert_ok "${B[@]}" SetMaxRunning u 32
assert_eq easy-backfill "$(prop Policy)" "policy restored"
assert_eq 32 "$(prop MaxRunning)" "max-running restored"
assert_ok "${B[@]}" Cancel t "$sid"
wait_state "$sid" CANCELLED
rm -f /etc/polkit-1/rules.d/50-xlurm-admin.rules

check "a forwarded environment leaves the disk once the job started (compaction at restart)"
out=$(as_user alice env XLURM21_SECRET=topsecret-9931 xbatch -t 60 -n xlurm-21-env --wrap 'echo $XLURM21_SECRET >~/xlurm-21-env.out' 2>&1)
eid=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
wait_for "[ \"\$(state_of $eid)\" = COMPLETED ]" 60
assert_eq topsecret-9931 "$(cat /home/alice/xlurm-21-env.out)" "the job got its environment"
assert_not_contains "$(as_user alice "${B[@]}" GetJob t "$eid")" topsecret-9931 "GetJob (owner) after start"
note "before the restart the pending record holds it: $(grep -c topsecret-9931 /var/lib/xlurm/jobs.log || true) line(s)"
kill "$monpid" 2>/dev/null || true
systemctl restart xlurmd
assert_eq 0 "$(grep -c topsecret-9931 /var/lib/xlurm/jobs.log || true)" "secret gone from jobs.log after compaction"
assert_eq "600 root" "$(stat -c '%a %U' /var/lib/xlurm/jobs.log)" "compacted jobs.log still root-only"
assert_eq 0 "$(grep -rlc topsecret-9931 /var/lib/xlurm | wc -l)" "secret nowhere under /var/lib/xlurm"
