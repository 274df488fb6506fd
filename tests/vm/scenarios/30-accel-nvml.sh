#!/bin/bash
# Accelerators on real systemd with simulated vendor libraries (tests/accel/fake_nvml.c and
# the DCMI fake, built on the host into $XLURM_VM_SRC/fakes by tests/vm/run) given to xlurmd
# through a drop-in, and device nodes made with mknod at the numbers the libraries report:
# discovery in xinfo, DeviceAllow (the job may open its GPU's node, and gets EPERM on the
# others), visibility variables, busy/unknown devices, exclude/include (polkit), a broken
# library with --backends nv (exit 78) and auto (CPU only), and Ascend next to NVIDIA.
# timeout: 600
set -euo pipefail
. "$XLURM_VM_LIB"

need_bin xlurmd
need_bin xlurm

fakes=$XLURM_VM_SRC/fakes
nvml_lib=$fakes/libfake_nvml.so
dcmi_lib=$fakes/libfake_dcmi_state_env.so   # reads XLURM_FAKE_DCMI_STATE (tests/vm/fakes/)
for f in "$nvml_lib" "$dcmi_lib"; do
    [ -f "$f" ] || fail "$f is missing: tests/vm/run stages the fakes into fakes/ (see fakes-build.log in its output dir)"
done

run_dir=/run/xlurm-fake-30               # the fakes' state files (xlurmd: ProtectSystem=strict reads them)
nv_state=$run_dir/nvml.state
asc_state=$run_dir/dcmi.state
dropin_dir=/run/systemd/system/xlurmd.service.d
dropin=$dropin_dir/fake.conf
# A drop-in that opens xlurm-nodev.slice to devices, as an admin's mistake would.
open_dropin=/etc/systemd/system.control/xlurm-nodev.slice.d/50-xlurm-vm-30-open.conf
probe_bin=/usr/local/bin/xlurm-devprobe
broken_lib=/nonexistent/xlurm-fake/libnvidia-ml.so.1

# Majors: 195 is NVIDIA's; the others are from the "local/experimental use" range (120-127),
# which the kernel never hands out dynamically. None may be registered: an unbacked node
# opens with ENXIO once the device cgroup lets it through, and with EPERM otherwise.
nv_major=195 uvm_major=120 asc_major=121 asc_ctl_major=122
nodes_made=()
outside_pid=""
job_ids=()
was_active=0
systemctl is-active -q xlurmd && was_active=1

cleanup() {
    local rc=$? id
    set +e
    check "cleanup: jobs, outside process, drop-in, xlurmd, device nodes"
    [ -n "$outside_pid" ] && kill "$outside_pid" 2>/dev/null
    for id in "${job_ids[@]}"; do
        xcancel "$id" >/dev/null 2>&1
        systemctl stop "xlurm-job-$id.service" 2>/dev/null
    done
    [ "${limits_set:-0}" = 1 ] && echo '{}' | xlurm limits --set -
    [ "${gate_set:-0}" = 1 ] && xlurm gate off
    rm -f "$dropin" "$open_dropin"
    rmdir "$dropin_dir" "${open_dropin%/*}" 2>/dev/null
    systemctl daemon-reload
    systemctl reset-failed xlurmd 2>/dev/null
    if [ "$was_active" = 1 ]; then systemctl restart xlurmd; else systemctl stop xlurmd; fi
    note "xlurmd: $(systemctl is-active xlurmd) (was active before: $was_active)"
    for id in "${job_ids[@]}"; do systemctl reset-failed "xlurm-job-$id.service" 2>/dev/null; done
    rm -f "${nodes_made[@]}" "$probe_bin"
    rm -rf "$run_dir" /home/alice/xlurm-30-*
    exit "$rc"
}
trap cleanup EXIT

# ---- helpers -----------------------------------------------------------------------------
nv_uuid=(GPU-5f1a0c3e-9d2b-4a6f-8e7c-000000000000 GPU-5f1a0c3e-9d2b-4a6f-8e7c-000000000001)
asc_uuid=(0A1B2C3D-00000001-00000002-00000003-00000004 0A1B2C3D-00000001-00000002-00000003-00000005)
asc_phy=(4 5)   # physical ids (/dev/davinci<N>) differ from the logical ids 0, 1 on purpose

# write_nv [EXTRA-GPU0] [EXTRA-GPU1]: the NVML fake's state (atomically replaced).
write_nv() {
    printf '%s\n' "# tests/vm/scenarios/$XLURM_VM_SCENARIO.sh: simulated NVML (format: tests/accel/fake_state.h)" \
        "device uuid=${nv_uuid[0]} bdf=0000:3b:00.0 minor=0 numa=0 ${1:-}" \
        "device uuid=${nv_uuid[1]} bdf=0000:86:00.0 minor=1 numa=1 ${2:-}" >"$nv_state.tmp"
    mv -f "$nv_state.tmp" "$nv_state"
}

# set_dropin LINE...: xlurmd's drop-in, [Service] lines.
set_dropin() {
    mkdir -p "$dropin_dir"
    printf '%s\n' "# tests/vm/scenarios/$XLURM_VM_SCENARIO.sh (removed at its end)" "[Service]" "$@" >"$dropin"
    systemctl daemon-reload
}
restart_xlurmd() {
    systemctl reset-failed xlurmd 2>/dev/null || true
    systemctl restart xlurmd
}

# mk_node PATH MAJOR MINOR
mk_node() {
    rm -f "$1"
    mknod -m 666 "$1" c "$2" "$3"
    nodes_made+=("$1")
}

# open_result PATH: what open(O_RDWR) says here (as root, no device cgroup): "opened" or strerror.
open_result() {
    local err
    if err=$( { : <>"$1"; } 2>&1 ); then echo opened; else echo "${err##*: }"; fi
}

# submit XBATCH-ARGS...: xbatch as alice; sets $last_id.
submit() {
    local out
    out=$(as_user alice xbatch "$@" 2>&1) || { echo "$out"; fail "xbatch $* failed"; }
    last_id=$(awk '/Submitted batch job/ {print $4}' <<<"$out")
    [ -n "$last_id" ] || { echo "$out"; fail "no job id from xbatch $*"; }
    job_ids+=("$last_id")
    note "job $last_id: xbatch $*"
}
field() { xqueue "$1" | sed -n "s/^ *$2: //p" | head -n1; }   # field ID KEY (xqueue ID, as root)
job_state() { field "$1" State; }
# unexpected_end ID WANT: shows job ID; fails naming the daemon's launch race when the job
# ended CANCELLED although nothing here cancelled it.
unexpected_end() {
    local q
    q=$(xqueue "$1" 2>&1 || true)
    echo "$q"
    case $q in
        *"State: CANCELLED"*"was stopped outside xlurm"*|*"State: CANCELLED"*"stopped without an exit status"*)
            fail "job $1 ended CANCELLED instead of $2 although nothing cancelled it: xlurmd reconciled it while it was still being launched (its unit not created yet, or created with the start job still queued, ActiveState=inactive) and finalized it -- a daemon race (src/daemon/service/reconcile.rs, src/daemon/systemd/outcome.rs UnitStatus::finished)" ;;
    esac
}
# wait_state ID STATE [SECS]
wait_state() {
    local id=$1 want=$2 limit=${3:-60} end st
    end=$(( $(date +%s) + limit ))
    while st=$(job_state "$id"); [ "$st" != "$want" ]; do
        case $st in
            COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|LAUNCH_FAILED|LOST)
                unexpected_end "$id" "$want"
                fail "job $id ended $st, not $want" ;;
        esac
        if [ "$(date +%s)" -ge "$end" ]; then
            xqueue "$id" || true
            fail "job $id is $st, not $want, after ${limit}s"
        fi
        sleep 0.5
    done
    note "ok: job $id $want"
}
alloc_devices() { field "$1" Allocated | sed -n 's/.*devices //p'; }

# run_probe NAME CMD...: CMD (e.g. xrun -i 0 --device nv) runs the probe as alice on the
# nodes in ${probe_nodes[@]}; sets $probe (the result file) and $probe_rc.
run_probe() {
    local name=$1 f out id
    shift
    f=/home/alice/xlurm-30-$name.txt
    rm -f "$f"
    probe_rc=0
    out=$(as_user alice "$@" "$probe_bin" "$f" "${probe_nodes[@]}" 2>&1) || probe_rc=$?
    echo "$out"
    id=$(sed -n 's/.*job \([0-9][0-9]*\): .*/\1/p' <<<"$out" | head -n1)
    [ -n "$id" ] && job_ids+=("$id")
    if [ ! -f "$f" ] || [ "$probe_rc" != 0 ]; then
        [ -n "$id" ] && unexpected_end "$id" COMPLETED
        fail "the probe job ($*) exited $probe_rc$([ -f "$f" ] || echo " and left no $f")"
    fi
    probe=$(cat "$f")
    printf '%s\n' "--- probe $name:" "$probe"
}
# probe_file NAME: the result of a probe started inside a batch job.
probe_file() { probe=$(cat "/home/alice/xlurm-30-$1.txt"); printf '%s\n' "--- probe $1:" "$probe"; }

# The probe's verdict on NODE, and assertions on it.
opened() { sed -n "s|^open $1: ||p" <<<"$probe"; }
expect_allowed() {   # past the device cgroup: no driver, so ENXIO or ENODEV, never EPERM
    local r
    r=$(opened "$1")
    case $r in
        "No such device or address"|"No such device") note "ok: $1 allowed by the cgroup ($r)" ;;
        *) fail "$1 should pass the device cgroup (ENXIO/ENODEV, no driver behind it) but open said [$r] ($2)" ;;
    esac
}
expect_denied() {
    local r
    r=$(opened "$1")
    [ "$r" = "Operation not permitted" ] || fail "$1 should be denied by the device cgroup (EPERM) but open said [$r] ($2)"
    note "ok: $1 denied (EPERM)"
}
expect_var() { assert_eq "$1=$2" "$(grep -m1 "^$1=" <<<"$probe")" "$1 in the job"; }

# dev_line VENDOR:ID: that device's xinfo line; wait_dev VENDOR:ID STATE SECS.
dev_line() { xinfo | grep -E "^$1 " || true; }
wait_dev() { wait_for "xinfo | grep -qE '^$1 [^ ]+ node -?[0-9]+ $2(,|\$)'" "$3" 0.5; }

# ---- setup -------------------------------------------------------------------------------
check "device numbers are free and unbacked in this VM"
for m in $nv_major $uvm_major $asc_major $asc_ctl_major; do
    if awk '/^Character devices:/ {c=1; next} /^$/ {c=0} c {print $1}' /proc/devices | grep -qx "$m"; then
        fail "character major $m is registered in this VM (/proc/devices): pick another one for the fake nodes"
    fi
done
note "ok: majors $nv_major $uvm_major $asc_major $asc_ctl_major unused"

mkdir -p "$run_dir"
mk_node /dev/nvidia0 $nv_major 0
mk_node /dev/nvidia1 $nv_major 1
mk_node /dev/nvidiactl $nv_major 255
mk_node /dev/nvidia-uvm $uvm_major 0
mk_node /dev/nvidia-uvm-tools $uvm_major 1
mk_node "/dev/davinci${asc_phy[0]}" $asc_major "${asc_phy[0]}"
mk_node "/dev/davinci${asc_phy[1]}" $asc_major "${asc_phy[1]}"
mk_node /dev/davinci_manager $asc_ctl_major 0
mk_node /dev/devmm_svm $asc_ctl_major 1
mk_node /dev/hisi_hdc $asc_ctl_major 2
ls -l /dev/nvidia* /dev/davinci* /dev/devmm_svm /dev/hisi_hdc
for n in /dev/nvidia0 "/dev/davinci${asc_phy[0]}"; do
    r=$(open_result "$n")
    case $r in
        "No such device or address"|"No such device") note "ok: root outside any device policy opens $n: $r" ;;
        *) fail "opening $n outside xlurm should fail with ENXIO/ENODEV (no driver), got [$r]: the checks below would mean nothing" ;;
    esac
done

cat >"$probe_bin" <<'EOF'
#!/bin/bash
# xlurm-devprobe FILE NODE...: the job's visibility variables and, per device node, what
# open(O_RDWR) says ("opened" or strerror), into FILE (written whole) and stdout.
f=$1; shift
{
    echo "XLURM_JOB_ID=${XLURM_JOB_ID:-}"
    for v in CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER ASCEND_RT_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES HIP_VISIBLE_DEVICES; do
        echo "$v=${!v-<unset>}"
    done
    echo "cgroup=$(sed -n 's/^0:://p' /proc/self/cgroup)"
    echo "unit_policy=$(systemctl show -p DevicePolicy --value "xlurm-job-$XLURM_JOB_ID.service")"
    for n in "$@"; do
        if err=$( { : <>"$n"; } 2>&1 ); then echo "open $n: opened"; else echo "open $n: ${err##*: }"; fi
    done
} >"$f.tmp"
mv -f "$f.tmp" "$f"
cat "$f"
EOF
chmod 0755 "$probe_bin"

# ---- NVIDIA through the simulated NVML ----------------------------------------------------
check "xlurmd loads the simulated NVML named by XLURM_NVML_LIBRARY (drop-in, restart)"
write_nv
# --idle-gpu-after 8s: the IdleGPU check below need not wait the default 30 minutes.
set_dropin "Environment=XLURM_NVML_LIBRARY=$nvml_lib" "Environment=XLURM_FAKE_GPU_STATE=$nv_state" \
    "ExecStart=" "ExecStart=/usr/bin/xlurmd --idle-gpu-after 8s"
since=$(date +%s)
restart_xlurmd
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd with the fake NVML"
journalctl -u xlurmd --since "@$since" --no-pager -q -o cat | grep -i 'accelerators' || true

check "xinfo lists both fake GPUs with their UUIDs and NUMA nodes"
info=$(as_user alice xinfo); echo "$info"
assert_eq "nv:0 ${nv_uuid[0]} node 0 ok" "$(grep '^nv:0 ' <<<"$info")" "GPU 0 in xinfo"
assert_eq "nv:1 ${nv_uuid[1]} node 1 ok" "$(grep '^nv:1 ' <<<"$info")" "GPU 1 in xinfo"

check "a job given GPU 0 passes the cgroup on /dev/nvidia0 and the shared nodes, gets EPERM on /dev/nvidia1"
probe_nodes=(/dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/davinci4)
run_probe gpu0 xrun -i 0 --device nv --
assert_eq 0 "$probe_rc" "probe job exit code"
expect_allowed /dev/nvidia0 "GPU 0's node"
expect_allowed /dev/nvidiactl "shared control node"
expect_allowed /dev/nvidia-uvm "shared node"
expect_allowed /dev/nvidia-uvm-tools "shared node"
expect_denied /dev/nvidia1 "GPU 1 is not the job's"
expect_denied /dev/davinci4 "another vendor's node"
expect_var CUDA_VISIBLE_DEVICES "${nv_uuid[0]}"
expect_var CUDA_DEVICE_ORDER PCI_BUS_ID
expect_var ASCEND_RT_VISIBLE_DEVICES -1
# A job with devices has its own device program, in the job slice.
expect_var unit_policy closed
expect_var cgroup "/xlurm.slice/xlurm-job-$(sed -n 's/^XLURM_JOB_ID=//p' <<<"$probe").service"

check "a CPU job (-g 0) sees CUDA_VISIBLE_DEVICES=-1 (even when the user set it) and no GPU node"
# It runs in xlurm-nodev.slice, closed by xlurmd at its start, with no device
# program of its own (one per unit costs PID 1 the most of a job's isolation).
assert_eq closed "$(systemctl show -p DevicePolicy --value xlurm-nodev.slice)" "xlurm-nodev.slice's DevicePolicy"
probe_nodes=(/dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm /dev/davinci4)
run_probe cpu env CUDA_VISIBLE_DEVICES=0 xrun -g 0 --
assert_eq 0 "$probe_rc" "probe job exit code"
expect_var CUDA_VISIBLE_DEVICES -1
expect_var unit_policy auto
expect_var cgroup "/xlurm.slice/xlurm-nodev.slice/xlurm-job-$(sed -n 's/^XLURM_JOB_ID=//p' <<<"$probe").service"
expect_denied /dev/nvidia0 "CPU job"
expect_denied /dev/nvidia1 "CPU job"
expect_denied /dev/nvidiactl "CPU job"
expect_denied /dev/nvidia-uvm "CPU job"
expect_denied /dev/davinci4 "CPU job"

check "xlurm-nodev.slice opened by an admin is closed again by xlurmd (it reads the policy back every 5 s)"
slice_policy() { systemctl show -p DevicePolicy --value xlurm-nodev.slice; }
since=$(date +%s)
systemctl set-property --runtime xlurm-nodev.slice DevicePolicy=auto
assert_eq auto "$(slice_policy)" "DevicePolicy just after systemctl set-property"
wait_for '[ "$(slice_policy)" = closed ]' 20 0.5
wait_for "journalctl -u xlurmd --since @$since -q -o cat | grep -q 'xlurm-nodev.slice was open to devices (DevicePolicy=auto'" 10 0.5
# A drop-in that wins over xlurmd's runtime one opens it at every reload; xlurmd
# closes it again each time, naming the drop-in in its journal.
mkdir -p "${open_dropin%/*}"
printf '%s\n' "# tests/vm/scenarios/30-accel-nvml.sh (removed at its end)" "[Slice]" "DevicePolicy=auto" >"$open_dropin"
since=$(date +%s)
systemctl daemon-reload
assert_eq auto "$(slice_policy)" "DevicePolicy just after the reload with the drop-in"
wait_for '[ "$(slice_policy)" = closed ]' 20 0.5
wait_for "journalctl -u xlurmd --since @$since -q -o cat | grep -q '50-xlurm-vm-30-open.conf'" 10 0.5
journalctl -u xlurmd --since "@$since" -q -o cat | grep 'open to devices' | tail -n 2
run_probe cpu-after env xrun -g 0 --
assert_eq 0 "$probe_rc" "probe job exit code"
expect_denied /dev/nvidia0 "CPU job after the slice was closed again"
expect_denied /dev/davinci4 "CPU job after the slice was closed again"
rm -f "$open_dropin"; rmdir "${open_dropin%/*}"
systemctl daemon-reload
assert_eq closed "$(slice_policy)" "DevicePolicy once the drop-in is gone"

check "two concurrent 1-GPU jobs get different GPUs, each fenced to its own"
probe_nodes=(/dev/nvidia0 /dev/nvidia1)
rm -f /home/alice/xlurm-30-pair*.txt
submit -g 1 --device nv -c 1 -t 300 --wrap "$probe_bin ~/xlurm-30-pairA.txt ${probe_nodes[*]}; sleep 300"
ja=$last_id
submit -g 1 --device nv -c 1 -t 300 --wrap "$probe_bin ~/xlurm-30-pairB.txt ${probe_nodes[*]}; sleep 300"
jb=$last_id
wait_state "$ja" RUNNING 60
wait_state "$jb" RUNNING 60
da=$(alloc_devices "$ja"); db=$(alloc_devices "$jb")
note "job $ja: $da, job $jb: $db"
assert_ne "$da" "$db" "the two jobs' devices"
assert_eq "nv:[0] nv:[1]" "$(printf '%s\n' "$da" "$db" | sort | xargs)" "both GPUs in use"
info=$(xinfo); echo "$info"
assert_contains "$info" "nv:0 ${nv_uuid[0]} node 0 ok, job " "GPU 0 held"
assert_contains "$info" "nv:1 ${nv_uuid[1]} node 1 ok, job " "GPU 1 held"
for j in A:$ja B:$jb; do
    name=${j%%:*} id=${j#*:}
    wait_for "[ -f /home/alice/xlurm-30-pair$name.txt ]" 30
    probe_file "pair$name"
    gpu=$(alloc_devices "$id" | tr -dc 0-9)
    other=$(( 1 - gpu ))
    expect_var CUDA_VISIBLE_DEVICES "${nv_uuid[$gpu]}"
    expect_allowed "/dev/nvidia$gpu" "job $id's own GPU"
    expect_denied "/dev/nvidia$other" "the other job's GPU"
    allow=$(systemctl show -p DeviceAllow --value "xlurm-job-$id.service")
    note "xlurm-job-$id DeviceAllow: $allow"
    assert_contains "$allow" "/dev/nvidia$gpu rw" "DeviceAllow of job $id"
    assert_not_contains "$allow" "/dev/nvidia$other " "DeviceAllow of job $id"
done
xcancel "$ja" "$jb"
wait_state "$ja" CANCELLED 60
wait_state "$jb" CANCELLED 60

check "a GPU limit of 1 for alice (set by name): her second GPU job waits with UserLimit while bob's runs"
limits_set=1
echo '{"users": {"alice": {"gpus": 1}}}' | xlurm limits --set -
assert_contains "$(xlurm limits)" '"alice"' "xlurm limits names her"
alice_uid=$(id -u alice)
assert_contains "$(as_user alice xinfo)" "GPUs: 0 of 1 (the limit set for user $alice_uid)" "her limit in xinfo"
assert_contains "$(as_user bob xinfo)" "your limits: none" "bob's xinfo"
submit -g 1 --device nv -c 1 -t 300 --wrap "sleep 300"
jl1=$last_id
wait_state "$jl1" RUNNING 60
submit -g 1 --device nv -c 1 -t 300 --wrap "sleep 300"
jl2=$last_id
wait_for "field $jl2 Reason | grep -q UserLimit" 20 0.5
assert_eq "UserLimit (GPUs: 1 of 1 in use)" "$(field "$jl2" Reason)" "alice's second GPU job"
out=$(as_user bob xbatch -g 1 --device nv -c 1 -t 300 --wrap "sleep 300" 2>&1) || { echo "$out"; fail "bob's xbatch failed"; }
jbob=$(awk '/Submitted batch job/ {print $4}' <<<"$out")
job_ids+=("$jbob")
wait_state "$jbob" RUNNING 60
assert_eq PENDING "$(job_state "$jl2")" "alice's second job while bob's runs on the free GPU"
assert_eq "UserLimit (GPUs: 1 of 1 in use)" "$(field "$jl2" Reason)" "still her limit"
assert_contains "$(as_user alice xinfo)" "GPUs: 1 of 1 (the limit set for user $alice_uid)" "her use in xinfo"
check "over her limit at submission: refused, naming the limit"
out=$(as_user alice xbatch -g 2 --device nv -c 1 --wrap true 2>&1) && fail "a 2-GPU job over her 1-GPU limit was queued: $out"
assert_contains "$out" "GPUs" "the refusal"
assert_contains "$out" "the limit set for user $alice_uid" "the refusal names the limit"
note "refused: $out"
check "an unknown name in the limits is refused and changes nothing"
out=$(echo '{"users": {"alise": {"gpus": 2}}}' | xlurm limits --set - 2>&1) && fail "limits naming an unknown user were taken"
assert_contains "$out" 'no user named "alise"' "the refusal"
assert_contains "$(xlurm limits)" '"gpus": 1' "the limits in force"
check "bob's job ends: alice's second job still waits for her own limit; hers ends: it starts"
xcancel "$jbob"
wait_state "$jbob" CANCELLED 60
sleep 2
assert_eq PENDING "$(job_state "$jl2")" "alice's second job, a GPU free but her limit reached"
xcancel "$jl1"
wait_state "$jl2" RUNNING 60
xcancel "$jl2"
wait_state "$jl2" CANCELLED 60
echo '{}' | xlurm limits --set -
limits_set=0

# ---- the accelerator gate (issue 19) -------------------------------------------------------
# login_probe USER NAME: the probe in USER's login session (su -l: PAM, pam_systemd, so a
# session scope in user-UID.slice) on the nodes in ${probe_nodes[@]}; sets $probe.
login_probe() {
    local f=/tmp/xlurm-30-login-$2.txt
    rm -f "$f"
    su -l "$1" -c "cat /proc/self/cgroup; $probe_bin $f ${probe_nodes[*]}" || fail "$1's login-session probe failed"
    probe=$(cat "$f"); rm -f "$f"
}
probe_nodes=(/dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm /dev/null /dev/ptmx /dev/zero)
check "gate off (the default): alice's login session opens a GPU node past the cgroup"
assert_contains "$(xlurm gate)" "accelerator gate: off" "xlurm gate"
login_probe alice off
expect_allowed /dev/nvidia0 "gate off"
assert_contains "$(su -l alice -c 'cat /proc/self/cgroup')" "user-$(id -u alice).slice" "alice's login session's cgroup"

check "gate on (admin only): alice's login session gets EPERM on the GPU nodes, keeps /dev/null, ptys..."
out=$(as_user alice xlurm gate on 2>&1) && fail "alice turned the gate on: $out"
assert_contains "$out" "org.xlurm.scheduler.manage" "alice's refusal"
gate_set=1
xlurm gate on
assert_contains "$(xlurm gate)" "accelerator gate: on" "xlurm gate"
assert_contains "$(as_user alice xinfo)" "accelerator gate: on" "xinfo"
cat /run/systemd/system/user-.slice.d/50-xlurm-gate.conf | head -20
login_probe alice on
expect_denied /dev/nvidia0 "a GPU node from a login session, gate on"
expect_denied /dev/nvidiactl "a control node from a login session, gate on"
expect_denied /dev/nvidia-uvm "a shared node from a login session, gate on"
for n in /dev/null /dev/ptmx /dev/zero; do
    assert_eq opened "$(opened "$n")" "$n from alice's login session, gate on"
done
rc=0; out=$(su -l alice -c "script -qec 'xrun --pty -t 60 -g 0 true' /dev/null" 2>&1) || rc=$?
echo "$out"
assert_eq 0 "$rc" "xrun --pty from alice's login session, gate on"

check "gate on: alice's job still opens exactly its own GPU; root's login session opens every node"
probe_nodes=(/dev/nvidia0 /dev/nvidia1 /dev/nvidiactl)
run_probe gate-job xrun -i 0 --device nv --
expect_allowed /dev/nvidia0 "the job's own GPU, gate on"
expect_allowed /dev/nvidiactl "the job's control node, gate on"
expect_denied /dev/nvidia1 "another GPU, gate on"
login_probe root root
expect_allowed /dev/nvidia0 "root's login session, gate on"
expect_allowed /dev/nvidia1 "root's login session, gate on"

# service_probe UNIT NAME: the probe as a root system service named UNIT (systemd-run: in
# system.slice unless a drop-in says otherwise); sets $probe, with its cgroup first.
service_probe() {
    local f=/tmp/xlurm-30-svc-$2.txt
    rm -f "$f"
    systemctl reset-failed "$1" 2>/dev/null || true
    systemd-run --quiet --wait --collect --unit="$1" /bin/sh -c \
        "cat /proc/self/cgroup >$f.cg; $probe_bin $f ${probe_nodes[*]}" || fail "the service probe $1 failed"
    probe=$(cat "$f.cg" "$f"); rm -f "$f" "$f.cg"
}
check "gate on: a system service (system.slice, as cron's jobs) gets EPERM; xlurmd and an exempt service (accel.slice) open the nodes"
probe_nodes=(/dev/nvidia0 /dev/nvidiactl /dev/null /dev/zero)
assert_contains "$(cat "/proc/$(systemctl show -p MainPID --value xlurmd)/cgroup")" "0::/accel.slice/xlurmd.service" "xlurmd's cgroup"
head -3 /run/systemd/system/system.slice.d/50-xlurm-gate.conf
assert_eq closed "$(systemctl show -p DevicePolicy --value system.slice)" "system.slice's DevicePolicy"
service_probe xlurm-30-plain plain
assert_contains "$probe" "0::/system.slice/xlurm-30-plain.service" "the plain service's cgroup"
expect_denied /dev/nvidia0 "a GPU node from a root system service, gate on"
expect_denied /dev/nvidiactl "a control node from a root system service, gate on"
for n in /dev/null /dev/zero; do
    assert_eq opened "$(opened "$n")" "$n from a system service, gate on"
done
# nvidia-persistenced.service is in --gate-exempt's default list.
service_probe nvidia-persistenced.service exempt
assert_contains "$probe" "0::/accel.slice/nvidia-persistenced.service" "the exempt service's cgroup"
expect_allowed /dev/nvidia0 "an exempt service (--gate-exempt), gate on"
expect_allowed /dev/nvidiactl "an exempt service (--gate-exempt), gate on"
# What xlurmd opens (the simulated NVML opens no node): a probe moved into its cgroup.
f=/tmp/xlurm-30-in-xlurmd.txt
sh -c "echo \$\$ >/sys/fs/cgroup/accel.slice/xlurmd.service/cgroup.procs && exec $probe_bin $f ${probe_nodes[*]}" \
    || fail "the probe in xlurmd's cgroup failed"
probe=$(cat "$f"); rm -f "$f"
expect_allowed /dev/nvidia0 "xlurmd's cgroup, gate on"

check "gate on survives systemctl daemon-reload and an xlurmd restart"
probe_nodes=(/dev/nvidia0)
systemctl daemon-reload
login_probe alice reload
expect_denied /dev/nvidia0 "after daemon-reload"
restart_xlurmd
assert_contains "$(xlurm gate)" "accelerator gate: on" "xlurm gate after a restart"
login_probe alice restart
expect_denied /dev/nvidia0 "after an xlurmd restart"

check "gate off: alice's login session opens the GPU node again, the drop-ins are gone"
xlurm gate off
gate_set=0
login_probe alice off-again
expect_allowed /dev/nvidia0 "gate off again"
[ ! -e /run/systemd/system/user-.slice.d/50-xlurm-gate.conf ] || fail "the gate's drop-in is left"
for d in system.slice user-0.slice nvidia-persistenced.service; do
    [ ! -e "/run/systemd/system/$d.d/50-xlurm-gate.conf" ] || fail "the gate's drop-in for $d is left"
done
probe_nodes=(/dev/nvidia0)
service_probe xlurm-30-plain plain-off
expect_allowed /dev/nvidia0 "a root system service, gate off again"

check "an outside process on GPU 1 makes it busy and keeps jobs off it"
sleep 1000 &
outside_pid=$!
write_nv "" "procs=$outside_pid"
wait_dev nv:1 busy 15
info=$(as_user alice xinfo); echo "$info"
assert_contains "$(grep -A1 '^nv:1 ' <<<"$info")" "1 outside processes" "xinfo names the outside process count"
rm -f /home/alice/xlurm-30-busy1.txt
submit -i 1 --device nv -c 1 --wrap "$probe_bin ~/xlurm-30-busy1.txt /dev/nvidia1"
jbusy=$last_id
wait_for "field $jbusy Reason | grep -q DevicesBusy" 20 0.5
note "job $jbusy: $(job_state "$jbusy"), $(field "$jbusy" Reason)"
probe_nodes=(/dev/nvidia0 /dev/nvidia1)
run_probe busy-g1 xrun -g 1 --device nv --
expect_var CUDA_VISIBLE_DEVICES "${nv_uuid[0]}"
expect_allowed /dev/nvidia0 "-g 1 job given GPU 0"
expect_denied /dev/nvidia1 "-g 1 job kept off the busy GPU"
assert_eq PENDING "$(job_state "$jbusy")" "the -i 1 job still waits"
assert_contains "$(field "$jbusy" Reason)" "DevicesBusy" "its reason"

check "clearing the outside process makes GPU 1 idle again within a few seconds"
t0=$(date +%s%N)
write_nv
wait_dev nv:1 ok 10
note "GPU 1 idle $(( ($(date +%s%N) - t0) / 1000000 )) ms after the state file was cleared"
kill "$outside_pid"; wait "$outside_pid" 2>/dev/null || true; outside_pid=""
wait_state "$jbusy" COMPLETED 60
probe_file busy1
expect_allowed /dev/nvidia1 "the job that waited for GPU 1"
expect_var CUDA_VISIBLE_DEVICES "${nv_uuid[1]}"

check "a monitoring error shows GPU 1 as unknown with the error, and keeps jobs off it"
t_unknown=$(date +%s)
write_nv "" "fail=procs:9"
wait_dev nv:1 unknown 15
info=$(as_user alice xinfo); echo "$info"
err=$(grep -A1 '^nv:1 ' <<<"$info" | tail -n1)
assert_contains "$err" "nvmlDeviceGetComputeRunningProcesses_v3(1)" "the failing call under the device"
assert_contains "$err" "Driver Not Loaded" "the library's error string"
errors=$(as_user alice xinfo --json | grep -o '"monitoring_error": "[^"]*' || true)
assert_contains "$errors" "nvmlDeviceGetComputeRunningProcesses_v3(1)" "monitoring_error in xinfo --json"
submit -i 1 --device nv -c 1 --wrap "true"
junk=$last_id
wait_for "field $junk Reason | grep -q DevicesUnknown" 20 0.5
note "job $junk: $(job_state "$junk"), $(field "$junk" Reason)"
sleep 3
assert_eq PENDING "$(job_state "$junk")" "the -i 1 job waits while GPU 1 is unknown"
write_nv
wait_dev nv:1 ok 10
# GPU 1 stayed unknown over several 2 s polls: xlurmd logged it once, on the change.
changes=$(journalctl -u xlurmd --since "@$t_unknown" --no-pager -q -o cat | grep -c '^nv:1 is now Unknown' || true)
assert_eq 1 "$changes" "the change to unknown logged once, not on every poll"
wait_state "$junk" COMPLETED 60

check "xlurm exclude/include: refused for alice (polkit), live for root; running jobs continue"
submit -i 1 --device nv -c 1 -t 300 --wrap "sleep 300"
jhold=$last_id
wait_state "$jhold" RUNNING 60
submit -i 1 --device nv -c 1 --wrap "true"
jwait=$last_id
wait_for "[ -n \"\$(field $jwait Reason)\" ]" 20 0.5
note "job $jwait: $(job_state "$jwait"), $(field "$jwait" Reason)"
rc=0; out=$(as_user alice xlurm exclude 1 2>&1) || rc=$?
echo "$out"
assert_ne 0 "$rc" "alice's xlurm exclude exit code"
assert_contains "$out" "polkit" "alice's refusal names polkit"
rc=0; out=$(as_user alice dbus-send --system --print-reply --dest=org.xlurm.Scheduler1 /org/xlurm/Scheduler1 \
    org.xlurm.Scheduler1.SetDevicesDisabled string:nv array:uint32:1 boolean:true 2>&1) || rc=$?
echo "$out"
assert_contains "$out" "org.xlurm.Scheduler1.Error.PermissionDenied" "D-Bus error for alice"
assert_eq "nv:1 ${nv_uuid[1]} node 1 ok, job $jhold" "$(dev_line nv:1)" "GPU 1 untouched by alice"
assert_ok xlurm exclude 1
info=$(as_user alice xinfo); echo "$info"
assert_eq "nv:1 ${nv_uuid[1]} node 1 disabled, job $jhold" "$(grep '^nv:1 ' <<<"$info")" "GPU 1 disabled, still held"
wait_for "field $jwait Reason | grep -q DevicesDisabled" 20 0.5
note "job $jwait: $(job_state "$jwait"), $(field "$jwait" Reason)"
assert_eq RUNNING "$(job_state "$jhold")" "the running job on GPU 1 continues"
assert_eq active "$(systemctl is-active "xlurm-job-$jhold.service")" "its unit"
rc=0; out=$(as_user alice xbatch -i 1 --device nv --wrap true 2>&1) || rc=$?
echo "$out"
assert_ne 0 "$rc" "a new -i 1 submission while GPU 1 is excluded"
assert_contains "$out" "disabled" "its refusal"
assert_ok xlurm include 1
assert_eq "nv:1 ${nv_uuid[1]} node 1 ok, job $jhold" "$(dev_line nv:1)" "GPU 1 enabled again"
xcancel "$jhold"
wait_state "$jhold" CANCELLED 60
wait_state "$jwait" COMPLETED 60

check "a job on an idle GPU shows IdleGPU after --idle-gpu-after (8 s), told once in its log; busy again clears it; its end keeps the figures"
write_nv "util=0 mem_used=1073741824 mem_total=85899345920" "util=0"
t_idle=$(date +%s)
submit -i 0 --device nv -c 1 -t 300 --wrap "sleep 300"
jidle=$last_id
wait_state "$jidle" RUNNING 60
idle_row() { as_user alice xqueue | awk -v id="$jidle" '$1 == id'; }
wait_for "idle_row | grep -q IdleGPU" 40 1
idle_row
assert_contains "$(field "$jidle" Reason)" "IdleGPU" "xqueue ID's reason"
info=$(as_user alice xinfo --json); echo "$info" | head -40
assert_contains "$info" '"util_pct": 0' "GetMachine's device load"
assert_contains "$info" '"mem_total": 85899345920' "GetMachine's device memory"
assert_contains "$(as_user alice xqueue --json "$jidle")" '"flag": "IdleGPU"' "the job's --json"
wait_for "as_user alice xlurm log $jidle | grep -q 'has been idle'" 20 1
log=$(as_user alice xlurm log "$jidle"); echo "$log"
assert_contains "$log" "nv:0 of job $jidle has been idle (under 5% busy)" "the notice in the job's own log"
n=$(journalctl -u xlurmd --since "@$t_idle" --no-pager -q -o cat | grep -c "job $jidle of alice: nv:0 of job $jidle has been idle" || true)
assert_eq 1 "$n" "the admin's journal line, once"

check "xlurm metrics: the text format, the queue, the idle GPU's load and holder; the timer writes the file"
m=$(as_user alice xlurm metrics); echo "$m" | head -80
assert_contains "$m" 'xlurm_jobs{state="running",user="alice"}' "alice's running jobs"
assert_contains "$m" 'xlurm_flagged_jobs{flag="IdleGPU"} 1' "the IdleGPU job"
assert_contains "$m" 'xlurm_device_utilization_ratio{device="nv:0"} 0' "the idle GPU's load"
assert_contains "$m" 'xlurm_device_memory_used_bytes{device="nv:0"} 1073741824' "its memory in use"
assert_contains "$m" "xlurm_device_info{device=\"nv:0\",uuid=\"${nv_uuid[0]}\",health=\"ok\",job=\"$jidle\",user=\"alice\"} 1" "its holder"
assert_contains "$m" "# TYPE xlurm_submitted_jobs_total counter" "a counter, as the 0.0.4 text names it"
# Every line a HELP or TYPE comment or a sample `name{labels} value` (what promtool parses).
bad=$(grep -vE '^# (HELP|TYPE) xlurm_[a-z_]+ .+$|^xlurm_[a-z_]+(\{[^}]*\})? [0-9.e+-]+$' <<<"$m" || true)
[ -z "$bad" ] || fail "lines outside the text format: $bad"
om=$(xlurm metrics --openmetrics)
assert_eq "# EOF" "$(tail -n1 <<<"$om")" "OpenMetrics ends with # EOF"
assert_contains "$om" "# TYPE xlurm_submitted_jobs counter" "an OpenMetrics counter family"
assert_contains "$om" "# UNIT xlurm_device_memory_used_bytes bytes" "an OpenMetrics unit"
check "xlurm top: the text view off a terminal, and live under script (q quits)"
t=$(as_user alice xlurm top); echo "$t"
assert_contains "$t" "job $jidle alice" "the GPU's holder"
assert_contains "$t" "IdleGPU" "the running job's flag"
assert_contains "$(grep -A3 '^DEV' <<<"$t")" "nv:0    0%" "the GPU's load"
# What an open xlurm top costs xlurmd: its CPU ticks over 12 s with and without it.
xpid=$(systemctl show -p MainPID --value xlurmd)
ticks() { awk '{print $14 + $15}' "/proc/$xpid/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks); sleep 12; idle=$(( $(ticks) - t0 ))
t0=$(ticks)
rc=0; live=$(as_user alice timeout 60 script -qec "stty rows 24 cols 80; xlurm top" /dev/null < <(sleep 12; printf q; sleep 5) 2>&1) || rc=$?
open=$(( $(ticks) - t0 ))
cost=$(awk "BEGIN {printf \"%.2f\", ($open - $idle) * 100 / ($hz * 12)}")
# Under emulation (TCG) every call costs several times what it does on the
# hardware the 1% goal is for, and xlurmd idle here costs about as much: the
# scenario fails only past 5%, which refreshing the whole queue would reach.
note "xlurmd's CPU over 12 s: $idle ticks without xlurm top, $open with it open ($hz ticks a second): ${cost}% of a CPU for top (goal < 1% on hardware)"
awk "BEGIN {exit !($cost < 5)}" || fail "an open xlurm top costs xlurmd ${cost}% of a CPU"
assert_eq 0 "$rc" "xlurm top on a terminal, ended by q"
assert_contains "$live" "accelerators" "the live screen"
# The screen is drawn word by word with cursor moves: look for one word.
assert_contains "$live" "IdleGPU" "the live screen's running job"
prom=/var/lib/prometheus/node-exporter/xlurm.prom
mkdir -p "$(dirname "$prom")"
systemctl start xlurm-metrics.timer
wait_for "[ -s $prom ]" 30 1
assert_contains "$(cat "$prom")" "xlurm_submitted_jobs_total" "the file the timer writes"
first=$(stat -c %Y "$prom")
wait_for "[ \$(stat -c %Y $prom) -gt $first ]" 45 1
note "rewritten $(( $(stat -c %Y "$prom") - first )) s later"
[ -z "$(ls -A "$(dirname "$prom")" | grep -v '^xlurm.prom$')" ] || fail "temporary files left: $(ls -A "$(dirname "$prom")")"
systemctl stop xlurm-metrics.timer
rm -rf /var/lib/prometheus

write_nv "util=85 mem_used=2147483648 mem_total=85899345920" ""
wait_for "! idle_row | grep -q IdleGPU" 20 1
sleep 3
assert_ok as_user alice xcancel "$jidle"
wait_state "$jidle" CANCELLED 60
eff=$(field "$jidle" Efficiency); note "efficiency: $eff"
assert_contains "$eff" "(peak 85%)" "the utilization peak kept with the end"
assert_contains "$eff" "device memory peak 2G" "the device memory peak"
[ "$(as_user alice xlurm log "$jidle" | grep -c 'has been idle')" = 1 ] || fail "the owner was told more than once"
write_nv

check "xlurm usage counts alice's ended jobs of this boot exactly, by state; every user's report needs polkit"
# json_sum KEY: the sum of the integer values of KEY in the JSON on stdin.
json_sum() { awk -v k="\"$1\":" '$1 == k {gsub(/[^0-9]/, "", $2); s += $2} END {print s + 0}'; }
q=$(as_user alice xqueue --all --mine --limit 0 --json)
ended=$(grep -E '"state": "' <<<"$q" | grep -vcE 'PENDING|RUNNING' || true)
cancelled=$(grep -c '"state": "CANCELLED"' <<<"$q" || true)
u=$(as_user alice xlurm usage --since 2d --json); echo "$u" | head -40
assert_eq "$ended" "$(json_sum jobs <<<"$u")" "alice's jobs in her usage report against xqueue"
assert_eq "$cancelled" "$(json_sum CANCELLED <<<"$u")" "her CANCELLED jobs"
[ -z "$(grep '"user": ' <<<"$u" | grep -v '"alice"')" ] || fail "another user's row in alice's report"
assert_contains "$(as_user alice xlurm usage --since 2d --period month)" "alice" "the table"
rc=0; out=$(as_user bob xlurm usage --all 2>&1) || rc=$?
assert_ne 0 "$rc" "bob's report of every user"
assert_contains "$out" "org.xlurm.scheduler.manage" "the refusal names the polkit action"
assert_contains "$(xlurm usage --all --since 2d --csv)" ",alice," "root's report of every user (CSV)"
ls -l /var/lib/xlurm/accounting

check "--backends nv with a broken library path: xlurmd refuses to start, exit 78, naming the library"
set_dropin "Environment=XLURM_NVML_LIBRARY=$broken_lib" "Environment=XLURM_FAKE_GPU_STATE=$nv_state" \
    "ExecStart=" "ExecStart=/usr/bin/xlurmd --backends nv"
since=$(date +%s)
systemctl reset-failed xlurmd 2>/dev/null || true
rc=0; systemctl restart xlurmd || rc=$?
assert_ne 0 "$rc" "systemctl restart xlurmd"
assert_eq 78 "$(systemctl show -p ExecMainStatus --value xlurmd)" "ExecMainStatus"
sleep 2
assert_eq failed "$(systemctl is-active xlurmd)" "xlurmd stays down (RestartPreventExitStatus=78)"
jl=$(journalctl -u xlurmd --since "@$since" --no-pager -q -o cat); echo "$jl" | tail -n 8
assert_contains "$jl" "$broken_lib" "the journal names the library"
assert_contains "$jl" "XLURM_NVML_LIBRARY" "the journal names the variable"

check "--backends auto with the same broken path starts with CPU only"
set_dropin "Environment=XLURM_NVML_LIBRARY=$broken_lib" "Environment=XLURM_FAKE_GPU_STATE=$nv_state" \
    "ExecStart=" "ExecStart=/usr/bin/xlurmd --backends auto"
since=$(date +%s)
restart_xlurmd
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd with --backends auto"
info=$(as_user alice xinfo); echo "$info"
assert_contains "$info" "no accelerators" "xinfo"
assert_not_contains "$info" "nv:0" "xinfo"
jl=$(journalctl -u xlurmd --since "@$since" --no-pager -q -o cat); echo "$jl" | grep -i accelerators || true
assert_contains "$jl" "$broken_lib" "the skipped vendor is logged with its library"
probe_nodes=(/dev/nvidia0)
run_probe cpu-only xrun -g 0 --
assert_eq 0 "$probe_rc" "a CPU job still runs"
expect_denied /dev/nvidia0 "CPU-only daemon"

# ---- Ascend (simulated DCMI) next to NVIDIA ----------------------------------------------
check "the simulated DCMI is discovered alongside the NVML one"
printf '%s\n' "# tests/vm/scenarios/$XLURM_VM_SCENARIO.sh: simulated DCMI" \
    "device uuid=${asc_uuid[0]} bdf=0000:c1:00.0 minor=${asc_phy[0]}" \
    "device uuid=${asc_uuid[1]} bdf=0000:c2:00.0 minor=${asc_phy[1]}" >"$asc_state"
write_nv
set_dropin "Environment=XLURM_NVML_LIBRARY=$nvml_lib" "Environment=XLURM_FAKE_GPU_STATE=$nv_state" \
    "Environment=XLURM_DCMI_LIBRARY=$dcmi_lib" "Environment=XLURM_FAKE_DCMI_STATE=$asc_state"
restart_xlurmd
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd with NVML and DCMI fakes"
info=$(as_user alice xinfo); echo "$info"
assert_eq "nv:0 ${nv_uuid[0]} node 0 ok" "$(grep '^nv:0 ' <<<"$info")" "GPU 0"
assert_eq "nv:1 ${nv_uuid[1]} node 1 ok" "$(grep '^nv:1 ' <<<"$info")" "GPU 1"
assert_eq "asc:0 ${asc_uuid[0]} node -1 ok" "$(grep '^asc:0 ' <<<"$info")" "NPU 0 (no sysfs NUMA node for a fake PCI address)"
assert_eq "asc:1 ${asc_uuid[1]} node -1 ok" "$(grep '^asc:1 ' <<<"$info")" "NPU 1"

check "a --device asc job gets ASCEND_RT_VISIBLE_DEVICES and its /dev/davinci node, not NVIDIA's"
probe_nodes=("/dev/davinci${asc_phy[0]}" "/dev/davinci${asc_phy[1]}" /dev/davinci_manager /dev/devmm_svm /dev/hisi_hdc
    /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm)
run_probe asc0 xrun -i 0 --device asc --
assert_eq 0 "$probe_rc" "probe job exit code"
expect_var ASCEND_RT_VISIBLE_DEVICES 0
expect_var CUDA_VISIBLE_DEVICES -1
expect_allowed "/dev/davinci${asc_phy[0]}" "logical 0 = physical ${asc_phy[0]}"
expect_allowed /dev/davinci_manager "Ascend shared node"
expect_allowed /dev/devmm_svm "Ascend shared node"
expect_allowed /dev/hisi_hdc "Ascend shared node"
expect_denied "/dev/davinci${asc_phy[1]}" "the other NPU"
expect_denied /dev/nvidia0 "NVIDIA GPU"
expect_denied /dev/nvidia1 "NVIDIA GPU"
expect_denied /dev/nvidiactl "NVIDIA control node"
expect_denied /dev/nvidia-uvm "NVIDIA shared node"

check "an NVIDIA job on the same daemon still gets its GPU and no NPU"
probe_nodes=(/dev/nvidia1 "/dev/davinci${asc_phy[0]}")
run_probe nv-mixed xrun -i 1 --device nv --
expect_var CUDA_VISIBLE_DEVICES "${nv_uuid[1]}"
expect_var ASCEND_RT_VISIBLE_DEVICES -1
expect_allowed /dev/nvidia1 "GPU 1"
expect_denied "/dev/davinci${asc_phy[0]}" "NPU node"
