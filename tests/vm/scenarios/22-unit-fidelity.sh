#!/bin/bash
# Inputs that are valid but unusual must reach the job exactly as sent and never give
# a unit systemd refuses after the job was accepted: arguments with $VAR, ${VAR}, %
# specifiers, quotes, newlines; environment values with control characters; a cwd
# under /tmp (xlurmd itself runs with PrivateTmp=yes); a job name with unicode and %.
# timeout: 120
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd

systemctl start xlurmd
D=(org.xlurm.Scheduler1 /org/xlurm/Scheduler1 org.xlurm.Scheduler1)
B=(busctl call --timeout=60 -- "${D[@]}")
dir=/tmp/xlurm-22-dir
rm -rf "$dir"; mkdir -p "$dir"; chmod 0755 "$dir"
trap 'rm -rf "$dir"' EXIT
field() { "${B[@]}" GetJob t "$1" | grep -o "\"$2\" [a-z] [^ ]*" | awk '{print $3}' | tr -d '"'; }
final() { case $(field "$1" state) in PENDING|RUNNING|"") return 1 ;; esac; }

args=('$HOME' '${PATH}' '$$' '%u' '%h' '%%' 'a b' $'new\nline' '\' "'" '"' '-' '--x' ';' '' '*' '~')
check "a job under /tmp (invisible to xlurmd's own PrivateTmp) with literal arguments and odd env"
out=$("${B[@]}" Submit 'a{sv}' 4 \
    argv as $((4 + ${#args[@]})) /bin/bash -c 'printf "[%s]\n" "$@" >out.txt; printf "[%s]\n" "$XLURM22_CTRL" "$XLURM22_NL" "$XLURM22_EMPTY" >env.txt' bash "${args[@]}" \
    cwd s "$dir" \
    env as 3 $'XLURM22_CTRL=a\x01b\x1bc\x7f' $'XLURM22_NL=x\ny' XLURM22_EMPTY= \
    name s 'ジョブ ✓ %n $X')
id=$(echo "$out" | awk '{print $2}')
wait_for "final $id" 60
state=$(field "$id" state)
"${B[@]}" GetJob t "$id" | tr ' ' '\n' | grep -A2 -E '"(state|detail|result|exit_code)"' | paste - - - | head
[ "$state" != LAUNCH_FAILED ] || fail "accepted job $id ended LAUNCH_FAILED: systemd refused its unit or could not start it (see detail above)"
assert_eq COMPLETED "$state" "job state"
want=$(printf '[%s]\n' "${args[@]}")
got=$(cat "$dir/out.txt"); printf '%s\n' "$got"
if [ "$got" != "$want" ]; then
    diff <(echo "$want") <(echo "$got") || true
    fail "arguments changed on the way (src/daemon/systemd/unit.rs literal(): systemd expands \$VAR/\${VAR} in ExecStart arguments and turns \$\$ into \$; every \$ must be doubled)"
fi
note "ok: every argument arrived literally"

check "after daemon-reload systemd still knows the job's command (it re-reads the transient unit file)"
out=$("${B[@]}" Submit 'a{sv}' 2 argv as 6 /bin/sh -c 'sleep 60' sh '$HOME' '%u' cwd s "$dir")
rid=$(echo "$out" | awk '{print $2}')
wait_for "[ \"\$(field $rid state)\" = RUNNING ]" 60
systemctl daemon-reload
exec_start=$(systemctl show -P ExecStart "xlurm-job-$rid.service")
note "ExecStart after reload: $exec_start"
assert_contains "$exec_start" "path=/bin/sh" "ExecStart after daemon-reload (systemd 252 cannot read back ExecStartEx= from a transient unit file: src/daemon/systemd/unit.rs must send plain ExecStart)"
if journalctl -q --no-pager -b -u "xlurm-job-$rid.service" | grep -q "Unknown key"; then
    fail "systemd could not read back xlurm-job-$rid.service's transient file: $(journalctl -q --no-pager -b -u "xlurm-job-$rid.service" | grep 'Unknown key' | head -1)"
fi
"${B[@]}" Cancel t "$rid" >/dev/null
wait_for "final $rid" 60
assert_eq "$(printf '[%s]\n' $'a\x01b\x1bc\x7f' $'x\ny' '')" "$(cat "$dir/env.txt")" "environment values with control characters"
assert_contains "$(xlurm queue "$id")" 'ジョブ ✓ %n $X' "job name kept"
