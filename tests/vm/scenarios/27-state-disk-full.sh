#!/bin/bash
# The state disk filling up: a submission is refused with the cause and a log
# line, nothing is half-queued, and submissions work again once there is room.
# Then a restart on the full disk (issue 16, item 3): xlurmd comes up with every
# pending job (the compaction it cannot write is put off, the log is not taken for
# damage), and they run once there is room again.
# timeout: 240
set -euo pipefail
. "$XLURM_VM_LIB"

systemctl stop xlurmd
mount -t tmpfs -o size=512k,mode=0700 tmpfs /var/lib/xlurm
cleanup() {
  systemctl stop xlurmd || true
  umount /var/lib/xlurm || true
  systemctl start xlurmd || true
}
trap cleanup EXIT
systemctl start xlurmd
assert_ok as_user alice xrun -g 0 /bin/true

check "a full state disk refuses submissions with the cause"
dd if=/dev/zero of=/var/lib/xlurm/fill bs=4k 2>/dev/null || true
# The job log's last page may still hold a record or two: submit until refused.
rc=0
for i in $(seq 20); do
  before=$(xlurm queue --all | wc -l)
  rc=0; out=$(as_user alice xbatch -t 60 --wrap true 2>&1) || rc=$?
  [ "$rc" = 0 ] || break
done
echo "$out"
assert_eq 1 "$rc" "a submission is refused once the disk is full"
assert_contains "$out" "could not record the job, nothing was queued"
assert_contains "$out" "No space left on device"
assert_eq "$before" "$(xlurm queue --all | wc -l)" "nothing was queued"
assert_contains "$(journalctl -u xlurmd -o cat --no-pager | tail -20)" "could not record a submission of alice"

check "with room again, submissions work"
rm -f /var/lib/xlurm/fill
assert_ok as_user alice xrun -g 0 /bin/true
systemctl is-active -q xlurmd || fail "xlurmd died"

check "the job log stayed whole: a restart reads it without finding damage, ended jobs still answer"
# A write cut short by the full disk must not leave half a record in the log
# (store.rs save() cuts it back), or the next start would keep the log aside as damaged.
first=$(xlurm queue --all --json | grep -o '"id": [0-9]*' | head -1 | awk '{print $2}')
systemctl restart xlurmd
if ls /var/lib/xlurm | grep -q corrupt; then
    fail "xlurmd found its job log damaged after the disk-full episode: $(ls /var/lib/xlurm)"
fi
assert_contains "$(xlurm queue "$first" --json)" "\"id\": $first" "GetJob of an ended job after the restart"
assert_ok as_user alice xrun -g 0 /bin/true
note "ok"

check "a restart on a full state disk keeps every pending job, and they run once there is room"
blocker=$(as_user alice xbatch -c 2 -t 60 --wrap 'sleep 600' | awk '{print $NF}')
wait_for "xlurm queue $blocker | grep -q 'State: RUNNING'" 60
ids=()
for i in 1 2 3; do
    ids+=("$(as_user alice xbatch -c 1 -t 60 --wrap true | awk '{print $NF}')")
done
for id in "${ids[@]}"; do
    assert_contains "$(xlurm queue "$id")" "State: PENDING" "job $id waits behind $blocker"
done
dd if=/dev/zero of=/var/lib/xlurm/fill bs=4k 2>/dev/null || true
systemctl restart xlurmd
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd came up on the full disk"
if ls /var/lib/xlurm | grep -q corrupt; then
    fail "the job log was taken for damaged: $(ls /var/lib/xlurm)"
fi
for id in "${ids[@]}"; do
    assert_contains "$(xlurm queue "$id")" "State: PENDING" "job $id is still queued"
done
assert_contains "$(xlurm queue "$blocker")" "State: RUNNING" "the running job was re-adopted"
assert_contains "$(journalctl -u xlurmd -o cat --no-pager | tail -30)" "could not compact"
rm -f /var/lib/xlurm/fill
as_user alice xcancel "$blocker"
for id in "${ids[@]}"; do
    wait_for "xlurm queue $id | grep -q 'State: COMPLETED'" 90
done
note "ok: jobs ${ids[*]} ran after the restart"
