#!/bin/bash
# xlurmd on real systemd: readiness, exit codes, pinning on the 2-node guest,
# OOM, time limit, launch failure, batch snapshot, cancel with a setsid
# grandchild, restart and kill -9 of the daemon during a job, ownership.
# timeout: 400
set -euo pipefail
. "$XLURM_VM_LIB"

check "systemctl start xlurmd returns only when the API answers"
systemctl start xlurmd
assert_ok busctl introspect org.xlurm.Scheduler1 /org/xlurm/Scheduler1 org.xlurm.Scheduler1
assert_contains "$(systemctl show -p Type,ActiveState xlurmd)" "ActiveState=active"

check "xinfo shows both NUMA nodes"
info=$(as_user alice xinfo)
echo "$info"
assert_contains "$info" "node0"
assert_contains "$info" "node1"

check "xrun prints status lines and exits with the job's code"
rc=0; out=$(as_user alice xrun -g 0 bash -c 'echo hello; exit 7' 2>&1) || rc=$?
echo "$out"
assert_eq 7 "$rc" "xrun exit code"
assert_contains "$out" "Task started."
assert_contains "$out" "hello" "xrun streams the job's output"
assert_not_contains "$out" "no longer in the journal" "alice's first job: nothing of its output was lost"

check "a job's CPU time and memory peak are recorded"
# CPU time comes from systemd. This guest's systemd (252) has no MemoryPeak and
# removes a unit's cgroup as soon as its processes are gone: xlurmd reads the
# running job's memory.peak there (every 5 s) and records the last figure.
json_num() { grep -o "\"$2\": *[0-9]*" <<<"$1" | grep -o "[0-9]*\$" || true; }
for code in 0 3; do
    out=$(as_user alice xrun -m 256M bash -c "dd if=/dev/zero of=/dev/null bs=64M count=4 2>/dev/null; sleep 7; exit $code" 2>&1) || true
    jid=$(awk '/Task started/ {print $3}' <<<"$out" | tr -d : | head -1)
    j=$(as_user alice xlurm queue "$jid" --json)
    peak=$(json_num "$j" memory_peak); cpu=$(json_num "$j" cpu_nsec)
    note "job $jid (exit $code): memory_peak ${peak:-none}, cpu_nsec ${cpu:-none}"
    [ "${peak:-0}" -ge $((64 << 20)) ] || fail "job $jid: memory peak ${peak:-none} < 64 MiB (its dd buffer)"
    [ "${cpu:-0}" -gt 0 ] || fail "job $jid: no CPU time recorded"
done

# A job touches 16 MiB; its anonymous pages must all sit on its CPU's node. On
# systemd 252 --memory-nodes=auto keeps them there with NUMAPolicy=local (no
# cpuset fence: a fenced start migrates PID 1's pages, see the admin guide);
# --memory-nodes=fence adds the fence. Each mode is checked on its own daemon.
placed() { # mode: runs the job, checks its CPU, its pages and (fence) its cpuset
    local mode=$1 st cpus mems
    rm -f /home/alice/status.txt
    assert_ok as_user alice xrun -c 1 bash -c 'x=$(head -c 16M /dev/zero | tr "\0" a); grep -E "Cpus_allowed_list|Mems_allowed_list" /proc/self/status > ~/status.txt; awk "/anon=/ { for (i = 1; i <= NF; i++) if (\$i ~ /^N[0-9]+=/) { split(substr(\$i, 2), f, \"=\"); n[f[1]] += f[2] } } END { for (k in n) printf \"pages N%s %d\\n\", k, n[k] }" /proc/$$/numa_maps >> ~/status.txt; grep -c " local " /proc/$$/numa_maps | sed "s/^/local_vmas /" >> ~/status.txt; systemctl show -p NUMAPolicy -p AllowedMemoryNodes "xlurm-job-$XLURM_JOB_ID.service" >> ~/status.txt; id -un >> ~/status.txt'
    st=$(cat /home/alice/status.txt); echo "$st"
    assert_contains "$st" "alice"
    assert_eq "alice" "$(stat -c %U /home/alice/status.txt)" "file written as alice"
    cpus=$(awk '/Cpus_allowed_list/ {print $2}' <<<"$st")
    mems=$(awk '/Mems_allowed_list/ {print $2}' <<<"$st")
    [ "$(awk -v n="N$cpus" '$1 == "pages" && $2 == n {print $3}' <<<"$st")" -ge 4096 ] ||
        fail "$mode: the job's 16 MiB is not on node $cpus, its CPU's node: $(grep '^pages' <<<"$st" | tr '\n' ' ')"
    awk -v n="N$cpus" '$1 == "pages" && $2 != n && $3 > 0 {exit 1}' <<<"$st" ||
        fail "$mode: job pages on another node than $cpus: $(grep '^pages' <<<"$st" | tr '\n' ' ')"
    if [ "$mode" = fence ]; then
        assert_eq "$cpus" "$mems" "fence: memory nodes fenced to the CPU's node (Mems_allowed_list)"
        assert_contains "$st" "AllowedMemoryNodes=$cpus" "fence: the unit's AllowedMemoryNodes"
    else
        assert_eq "0-1" "$mems" "local: no cpuset fence on memory"
        assert_contains "$st" "NUMAPolicy=local" "local: the unit's NUMAPolicy"
        grep -qx 'AllowedMemoryNodes=' <<<"$st" || fail "local: the unit has AllowedMemoryNodes"
        [ "$(awk '$1 == "local_vmas" {print $2}' <<<"$st")" -gt 0 ] || fail "local: numa_maps shows no local policy"
    fi
    note "$mode: CPU $cpus, memory nodes $mems, pages $(grep '^pages' <<<"$st" | awk '{print $2 "=" $3}' | tr '\n' ' ')"
}
check "the job runs as alice, pinned to one CPU, its memory on that CPU's node (--memory-nodes=auto: local on systemd $(systemctl --version | awk 'NR == 1 {print $2}'))"
placed local
check "--memory-nodes=fence: the same job fenced to its node by its cpuset"
mkdir -p /run/systemd/system/xlurmd.service.d
trap 'rm -f /run/systemd/system/xlurmd.service.d/10-fence.conf; systemctl daemon-reload' EXIT
printf '[Service]\nExecStart=\nExecStart=/usr/bin/xlurmd --memory-nodes=fence\n' >/run/systemd/system/xlurmd.service.d/10-fence.conf
systemctl daemon-reload; systemctl restart xlurmd
placed fence
rm -f /run/systemd/system/xlurmd.service.d/10-fence.conf
systemctl daemon-reload; systemctl restart xlurmd
trap - EXIT

check "a job past its memory budget ends OUT_OF_MEMORY"
rc=0; out=$(as_user alice xrun -m 48M bash -c 'x=$(head -c 300M /dev/zero | tr "\0" a); echo ${#x}' 2>&1) || rc=$?
echo "$out"
assert_eq 137 "$rc" "OOM exit code"
assert_contains "$out" "OUT_OF_MEMORY"

check "a job past its time limit ends TIMEOUT"
rc=0; out=$(as_user alice xrun -t 2 sleep 60 2>&1) || rc=$?
echo "$out"
assert_eq 124 "$rc" "timeout exit code"
assert_contains "$out" "TIMEOUT"

check "a missing binary ends LAUNCH_FAILED with the reason"
rc=0; out=$(as_user alice xrun /nonexistent/binary 2>&1) || rc=$?
echo "$out"
assert_eq 125 "$rc" "launch failure exit code"
assert_contains "$out" "LAUNCH_FAILED"
assert_contains "$out" "EXEC"

check "xbatch runs the snapshot even if the file changes"
as_user_sh alice 'printf "#!/bin/bash\n#SBATCH --job-name=snap\necho original > ~/snap.out\n" > ~/snap.sh'
out=$(as_user alice xbatch -t 30 snap.sh 2>&1); echo "$out"
id=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
as_user_sh alice 'echo "echo changed > ~/snap.out" > ~/snap.sh'
wait_for "as_user alice xqueue $id | grep -q 'State: COMPLETED'" 60
assert_eq original "$(cat /home/alice/snap.out)" "snapshot used"
assert_contains "$(as_user alice xqueue $id)" "snap"

check "xcancel kills every process, including a setsid grandchild"
out=$(as_user alice xbatch --wrap 'setsid sleep 1000 & sleep 1000' 2>&1); echo "$out"
id=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
wait_for "as_user alice xqueue $id | grep -q 'State: RUNNING'" 60
wait_for "pgrep -u alice -f 'sleep 1000' >/dev/null" 30
check "bob cannot cancel alice's job"
rc=0; out=$(as_user bob xcancel "$id" 2>&1) || rc=$?
echo "$out"
assert_eq 1 "$rc" "bob's xcancel fails"
assert_contains "$out" "belongs to alice"
assert_ok as_user alice xcancel "$id"
wait_for "as_user alice xqueue $id | grep -q 'State: CANCELLED'" 60
wait_for "! pgrep -u alice -f 'sleep 1000' >/dev/null" 30

check "restart and kill -9 of xlurmd keep a running job and its exit status"
out=$(as_user alice xbatch -t 120 --wrap 'sleep 8; exit 3' 2>&1); echo "$out"
id=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
wait_for "as_user alice xqueue $id | grep -q 'State: RUNNING'" 60
systemctl restart xlurmd
assert_contains "$(as_user alice xqueue $id)" "RUNNING"
systemctl kill -s KILL xlurmd
wait_for "systemctl is-active -q xlurmd" 60
wait_for "as_user alice xqueue $id 2>/dev/null | grep -q 'State: FAILED'" 90
assert_contains "$(as_user alice xqueue $id)" "Exit code: 3"
assert_eq "" "$(systemctl list-units --all --plain --no-legend "xlurm-job-$id.service")" "unit collected"

check "journalctl -u shows a job's output; xlurm log gives it to its owner only"
rc=0; as_user alice xrun -g 0 bash -c 'echo marker-$XLURM_JOB_ID' || rc=$?
last=$(as_user alice xqueue --all --mine | awk 'NR>1 {id=$1} END {print id}')
wait_for "journalctl -u xlurm-job-$last.service | grep -q marker-$last" 30
assert_contains "$(as_user alice xlurm log $last)" "marker-$last"
assert_contains "$(as_user alice xqueue $last --log)" "marker-$last"
rc=0; out=$(as_user bob xlurm log $last 2>&1) || rc=$?
assert_eq 1 "$rc" "bob cannot read alice's output"
assert_contains "$out" "only its owner and root"

check "xlurm log -f follows a chatty job to its end"
out=$(as_user alice xbatch --wrap 'for i in $(seq 1 2000); do echo line-$i; done; sleep 1; echo done-marker' 2>&1)
id=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
t0=$(date +%s.%N)
log=$(as_user alice xlurm log -f "$id")
t1=$(date +%s.%N)
assert_eq 2001 "$(echo "$log" | grep -c -E '^(line-[0-9]+|done-marker)$')" "every line arrived once"
assert_contains "$log" "done-marker"
note "followed 2001 lines in $(awk "BEGIN {print $t1 - $t0}") s"

check "--output writes a file opened with the user's rights, %j becomes the job ID"
rm -f /home/alice/out.txt /home/alice/out-*.txt
assert_ok as_user alice xrun -o out.txt bash -c 'echo to-file; echo line2'
wait_for "grep -q line2 /home/alice/out.txt" 30
assert_eq "to-file" "$(head -1 /home/alice/out.txt)" "output file content"
assert_eq "alice" "$(stat -c %U /home/alice/out.txt)" "output file owned by alice"
out=$(as_user alice xbatch -o 'out-%j.txt' --wrap 'echo batch-out' 2>&1); echo "$out"
id=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
wait_for "grep -q batch-out /home/alice/out-$id.txt" 60
before=$(as_user alice xqueue --all --mine | wc -l)
rc=0; out=$(as_user alice xrun -o /etc/xlurm-owned-by-root.txt /bin/true 2>&1) || rc=$?
assert_eq 1 "$rc" "--output to an unwritable path is refused"
assert_contains "$out" "Permission denied"
assert_eq "$before" "$(as_user alice xqueue --all --mine | wc -l)" "nothing was queued"
[ ! -e /etc/xlurm-owned-by-root.txt ] || fail "a file appeared in /etc"

check "--output survives a daemon restart without losing or repeating lines"
rm -f /home/alice/restart.txt
out=$(as_user alice xbatch -o restart.txt --wrap 'echo before; sleep 6; echo after' 2>&1)
id=$(echo "$out" | awk '/Submitted batch job/ {print $4}')
wait_for "grep -q before /home/alice/restart.txt" 30
systemctl restart xlurmd
wait_for "grep -q after /home/alice/restart.txt" 60
assert_eq "before
after" "$(cat /home/alice/restart.txt)" "each line exactly once"

check "busctl introspect matches dbus/org.xlurm.Scheduler1.xml"
busctl --xml-interface introspect org.xlurm.Scheduler1 /org/xlurm/Scheduler1 \
  | awk '/<interface name="org.xlurm.Scheduler1">/,/<\/interface>/' | sed 's/^[[:space:]]*//' > /tmp/live.xml
cat /tmp/live.xml
[ -f dbus/org.xlurm.Scheduler1.xml ] || fail "dbus/org.xlurm.Scheduler1.xml is missing"
sed 's/^[[:space:]]*//' dbus/org.xlurm.Scheduler1.xml | awk '/<interface name="org.xlurm.Scheduler1">/,/<\/interface>/' > /tmp/doc.xml
assert_ok diff -u /tmp/doc.xml /tmp/live.xml
