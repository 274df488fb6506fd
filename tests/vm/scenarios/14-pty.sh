#!/bin/bash
# xrun --pty (issue 19), as alice under `script` (a terminal of her own): the job's shell
# has a /dev/pts terminal, follows a resize, Ctrl-C interrupts its foreground `sleep` and
# the shell lives on, `exit 5` is xrun's exit code; killing the outer `script` (the
# terminal going away) or xrun itself ends the job CANCELLED; while it waits xrun says so
# and Ctrl-C withdraws it; alice cannot pass bob's terminal; xbatch --pty is refused.
# timeout: 300
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurm
systemctl start xlurmd

dir=$(mktemp -d /tmp/xlurm-14.XXXXXX)
chmod 0755 "$dir"
blocker=""
cleanup() {
    local rc=$?
    set +e
    exec 7>&- 8>&- 9>&- 2>/dev/null
    pkill -u alice -x script; pkill -u bob -x script
    [ -n "$blocker" ] && xcancel "$blocker" >/dev/null 2>&1
    rm -rf "$dir"
    exit "$rc"
}
trap cleanup EXIT

# session NAME FD USER CMD: `script` as USER running CMD on its own terminal, fed from
# $dir/NAME.in (written through descriptor FD), output in $dir/NAME.out, exit code in
# $dir/NAME.rc.
session() {
    local name=$1 fd=$2 user=$3
    shift 3
    mkfifo "$dir/$name.in"
    ( rc=0
      as_user "$user" script -qfec "$*" /dev/null <"$dir/$name.in" >"$dir/$name.out" 2>&1 || rc=$?
      echo "$rc" >"$dir/$name.rc" ) &
    eval "exec $fd>\"\$dir/\$name.in\""
}
out() { cat "$dir/$1.out"; }
# diagnose: what the sessions printed and where the jobs' processes stand.
diagnose() {
    local f pid
    echo "--- diagnose"
    for f in "$dir"/*.out; do echo "--- $f:"; cat -v "$f"; echo; done
    xqueue -a || true
    for pid in $(pgrep -u alice) $(pgrep -u bob); do
        echo "--- pid $pid: $(ps -o pid=,ppid=,pgid=,sid=,tpgid=,stat=,tty=,args= -p "$pid")"
        ls -l "/proc/$pid/fd" 2>/dev/null | sed -n '2,6p'
        echo "    wchan: $(cat "/proc/$pid/wchan" 2>/dev/null); stack of threads:"
        for t in /proc/$pid/task/*; do echo "    $(cat $t/comm) $(cat $t/wchan 2>/dev/null) $(cat $t/stat | cut -d' ' -f3)"; done
    done
}
# waits COND SECS: wait_for, diagnosing on a timeout.
waits() {
    local end=$(( $(date +%s) + $2 ))
    until eval "$1"; do
        if [ "$(date +%s)" -ge "$end" ]; then diagnose; fail "timed out after $2 s waiting for: $1"; fi
        sleep 0.5
    done
}
seen() {
    local end=$(( $(date +%s) + ${3:-60} ))
    until grep -qE -- "$2" "$dir/$1.out"; do
        if [ "$(date +%s)" -ge "$end" ]; then diagnose; fail "no '$2' in session $1"; fi
        sleep 0.5
    done
}
job_of() { sed -n 's/.*job \([0-9][0-9]*\): Task started.*/\1/p' "$dir/$1.out" | head -n1; }
state_of() { xqueue "$1" | sed -n 's/^ *State: //p'; }
detail_of() { xqueue "$1" | sed -n 's/^ *Detail: //p'; }
xrun_pid() { pgrep -u alice -x xrun | head -n1; }

check "xrun --pty: the job's login shell runs on a terminal of its own"
session a 7 alice xrun --pty -t 300
# Typed before the shell's line editor starts, keys are flushed (as on any terminal):
# wait for the prompt.
seen a 'Task started'
seen a '\$ '
printf 'echo M1-$((1+1)); tty\n' >&7
seen a 'M1-2'
seen a '^/dev/pts/[0-9]+'
out a
ja=$(job_of a)
[ -n "$ja" ] || fail "no job id in xrun's output"
note "job $ja"
assert_eq RUNNING "$(state_of "$ja")" "the interactive job"
main=$(systemctl show -p MainPID --value "xlurm-job-$ja.service")
assert_eq xlurm "$(ps -o comm= -p "$main")" "the job's main process: the xlurm __pty wrapper (session leader)"
assert_eq "$(getent passwd alice | cut -d: -f7)" "$(ps -o comm= --ppid "$main" | sed 's|^|/bin/|')" "the wrapper's child is alice's login shell"

check "a resize of xrun's terminal reaches the job (stty size)"
xterm_pts=$(readlink "/proc/$(xrun_pid)/fd/0")
note "xrun's terminal: $xterm_pts"
stty -F "$xterm_pts" rows 33 cols 91
sleep 1
printf 'echo M2-$(stty size)\n' >&7
seen a 'M2-33 91'

check "Ctrl-C interrupts the job's foreground sleep; its shell lives on"
printf 'sleep 100\n' >&7
waits "pgrep -u alice -x sleep >/dev/null" 30
printf '\003' >&7
printf 'echo M3-$?\n' >&7
seen a 'M3-130'
waits "! pgrep -u alice -x sleep >/dev/null" 10
assert_eq RUNNING "$(state_of "$ja")" "the job after Ctrl-C"

check "exit 5 in the job is xrun's exit code"
printf 'exit 5\n' >&7
waits "[ -s '$dir/a.rc' ]" 60
exec 7>&-
out a
assert_eq 5 "$(cat "$dir/a.rc")" "xrun's exit code (through script -e)"
waits "[ \"\$(state_of $ja)\" = FAILED ]" 30
assert_eq 5 "$(xqueue "$ja" | sed -n "s/^ *Exit code: //p")" "the job's exit code"

check "killing the outer script (the terminal goes away) ends the job CANCELLED"
session b 8 alice xrun --pty -t 300 bash --norc --noprofile -i
seen b '\$ '
printf 'echo M4-$((2+2))\n' >&8
seen b 'M4-4'
jb=$(job_of b)
pkill -KILL -u alice -x script
waits "[ \"\$(state_of $jb)\" = CANCELLED ]" 60 || { xqueue "$jb"; fail "job $jb is $(state_of "$jb") after its terminal went away"; }
note "job $jb: $(state_of "$jb"): $(detail_of "$jb")"
exec 8>&-

check "killing xrun itself (SIGKILL: no cancel sent) hangs the job up: CANCELLED, even for a shell that ignores SIGHUP"
session c 9 alice xrun --pty -t 300 bash --norc --noprofile -i
seen c '\$ '
# The shell ignores SIGHUP, so it reads EOF and exits 0: the in-job wrapper
# (xlurm __pty, the session leader) must still see the hang-up.
printf "trap '' HUP; echo M5-\$((2+3))\n" >&9
seen c 'M5-5'
jc=$(job_of c)
kill -KILL "$(xrun_pid)"
waits "[ \"\$(state_of $jc)\" = CANCELLED ]" 60 || { xqueue "$jc"; fail "job $jc is $(state_of "$jc") after its xrun was killed"; }
assert_contains "$(detail_of "$jc")" "terminal hung up" "why"
pkill -u alice -x script || true
exec 9>&-

check "while it waits, xrun says so and Ctrl-C withdraws it"
blocker=$(as_user bob xbatch -c 2 -t 300 --wrap 'sleep 300' | awk '{print $4}')
waits "[ \"\$(state_of $blocker)\" = RUNNING ]" 60
session d 7 alice xrun --pty -c 2 -t 300 true
seen d 'Waiting for resources'
printf '\003' >&7
seen d 'withdrawing'
waits "[ -s '$dir/d.rc' ]" 60
out d
jd=$(sed -n 's/.*job \([0-9][0-9]*\): Waiting.*/\1/p' "$dir/d.out" | head -n1)
assert_eq CANCELLED "$(state_of "$jd")" "the withdrawn job"
exec 7>&-
xcancel "$blocker" >/dev/null; blocker=""

check "alice cannot pass bob's terminal"
session e 8 bob bash --norc --noprofile -i
seen e '\$ '
printf 'echo M6-$((3+3))\n' >&8
seen e 'M6-6'
bob_pts=$(readlink "/proc/$(pgrep -u bob -x bash | head -n1)/fd/0")
note "bob's terminal: $bob_pts"
# Root hands alice a descriptor of bob's terminal (she could not open it herself); her
# client passes it as xrun --pty passes its own (tests/vm/fakes/submit_with_pty.c).
tool=$XLURM_VM_SRC/fakes/submit_with_pty
[ -x "$tool" ] || fail "$tool is missing: tests/vm/run stages it into fakes/ (see fakes-build.log)"
rc=0
msg=$(as_user alice "$tool" 5 2>&1 5<>"$bob_pts") || rc=$?
note "alice's submission on bob's terminal: rc $rc: $msg"
[ "$rc" != 0 ] || fail "alice submitted a job on bob's terminal"
assert_contains "$msg" "InvalidArgs" "the refusal"
assert_contains "$msg" "not yours" "the refusal"
# Her own terminal, handed down the same way, is taken: the check is of the owner.
session f 9 alice bash --norc --noprofile -i
seen f '\$ '
alice_pts=$(readlink "/proc/$(pgrep -u alice -x bash | head -n1)/fd/0")
msg=$(as_user alice "$tool" 5 2>&1 5<>"$alice_pts") || fail "alice's own terminal was refused: $msg"
jf=${msg#submitted }
note "alice's own terminal $alice_pts: job $jf"
# Taken, and run on it; but that terminal already controls her shell's session, which
# the kernel does not let another session take (TIOCSCTTY: EPERM): the job says so on
# it and fails, rather than running without job control. (xrun --pty's pty is new.)
waits "[ \"\$(state_of $jf)\" = FAILED ]" 60
seen f 'cannot make the job.s terminal its controlling terminal'

printf 'exit\n' >&9
exec 9>&-
printf 'exit\n' >&8
exec 8>&-

check "xbatch --pty is refused"
rc=0
msg=$(as_user alice xbatch --pty --wrap true 2>&1) || rc=$?
[ "$rc" != 0 ] || fail "xbatch --pty was accepted"
assert_contains "$msg" "xrun --pty" "the refusal"
