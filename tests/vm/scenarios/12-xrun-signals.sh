#!/bin/bash
# xrun: Ctrl-C (SIGINT), SIGTERM and a hang-up cancel the job, and xrun still
# prints its final state and exits 130. xrun stays attached through a restart
# or kill -9 of xlurmd.
# timeout: 180
set -euo pipefail
. "$XLURM_VM_LIB"
systemctl start xlurmd

for sig in INT TERM HUP; do
  check "SIG$sig to xrun cancels its job and reports it"
  rm -f /tmp/xrun-$sig.out
  # setsid: xrun is a process group leader, as in a terminal, and no shell eats the signal.
  setsid bash -c "cd /home/alice && setpriv --reuid=alice --regid=alice --init-groups --reset-env xrun -g 0 sleep 300 >/tmp/xrun-$sig.out 2>&1; echo \$? >/tmp/xrun-$sig.rc" &
  wait_for "grep -q 'Task started.' /tmp/xrun-$sig.out" 60
  pid=$(pgrep -u alice -x xrun || pgrep -u alice -f 'xrun -g 0 sleep 300' | head -1)
  [ -n "$pid" ] || fail "no xrun process"
  kill -s "$sig" "$pid"
  wait_for "[ -s /tmp/xrun-$sig.rc ]" 60
  out=$(cat /tmp/xrun-$sig.out); echo "$out"
  assert_eq 130 "$(cat /tmp/xrun-$sig.rc)" "xrun exit code after SIG$sig"
  assert_contains "$out" "CANCELLED"
  wait_for "! pgrep -u alice -x sleep >/dev/null" 30
  rm -f /tmp/xrun-$sig.rc
done

for how in restart kill; do
  check "xrun stays attached while xlurmd goes away ($how) and reports the job's exit"
  rc=0
  as_user alice xrun -g 0 bash -c 'echo before; sleep 6; echo after; exit 5' >/tmp/xrun-$how.out 2>&1 &
  p=$!
  sleep 2.5
  if [ $how = restart ]; then systemctl restart xlurmd; else systemctl kill -s KILL xlurmd; fi
  wait $p || rc=$?
  out=$(cat /tmp/xrun-$how.out); echo "$out"
  assert_eq 5 "$rc" "xrun exit code"
  assert_contains "$out" "before"
  assert_contains "$out" "after" "output written after the daemon came back"
  assert_contains "$out" "FAILED (exit 5)"
  rm -f /tmp/xrun-$how.out
done
