#!/bin/bash
# The same batch scripts under real Slurm and under xlurm (issue 18): Debian's
# Slurm 22.05 (slurmctld and slurmd on this one node, select/cons_tres,
# proctrack/linuxproc) and xlurmd run each script as alice from a directory of
# their own; what the scripts print must agree line by line once job IDs are
# replaced by names: an array's tasks with their SLURM_ARRAY_* and -o %A_%a
# files, a dependency chain's order, and a job's Slurm variables. An afterok on
# a job that failed leaves the dependent waiting with reason
# DependencyNeverSatisfied under both. At the end every job's final state,
# side by side, must agree too.
# Slurm's daemons are disabled at boot in the image (tests/vm/build-image.sh)
# and stopped again at the end.
# timeout: 600
set -euo pipefail
. "$XLURM_VM_LIB"
need_bin xlurmd
command -v slurmctld >/dev/null || fail "slurmctld is not in the image (tests/vm/build-image.sh installs it)"

cleanup() {
    scancel -u alice 2>/dev/null || true
    systemctl stop slurmd slurmctld munge 2>/dev/null || true
    ip addr del 10.77.0.1/32 dev lo 2>/dev/null || true
}
trap cleanup EXIT
systemctl start xlurmd
# Waiting for "alice has no job left" below must not wait on another
# scenario's leftovers.
left=$(active_ids alice)
# shellcheck disable=SC2086
[ -z "$left" ] || { note "cancelling alice's jobs left by an earlier scenario: $left"; xcancel $left >/dev/null; }

check "a one-node Slurm: munge, slurmctld, slurmd"
host=$(hostname -s)
# The guest has no network: Slurm resolves its host with AI_ADDRCONFIG, which
# finds nothing while the only IPv4 address is 127.0.0.1. One more address on lo.
ip addr add 10.77.0.1/32 dev lo
# The node as slurmd sees it (CPUs, sockets, memory), so that it registers.
node=$(slurmd -C | grep '^NodeName=' | sed 's/ UpTime=.*//')
mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd
cat >/etc/slurm/slurm.conf <<EOF
# tests/vm/scenarios/17-slurm-compare.sh
ClusterName=xlurmvm
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
ReturnToService=2
MpiDefault=none
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
note "node: $node"
systemctl start munge slurmctld slurmd
wait_for '[ "$(sinfo -h -o %T 2>/dev/null)" = idle ]' 90 1 ||
    fail "Slurm's node never became idle: $(sinfo 2>&1); $(journalctl -q --no-pager -u slurmctld -u slurmd | tail -5)"
note "$(sinfo)"

# run SYSTEM SCRIPT [ARGS]: submits ~/SYSTEM/SCRIPT as alice from ~/SYSTEM
# (sbatch for slurm, xbatch for xlurm) and prints the job ID.
run() {
    local system=$1 out
    shift
    case $system in
        slurm) out=$(as_user_sh alice "cd ~/slurm && sbatch $*" 2>&1) ;;
        xlurm) out=$(as_user_sh alice "cd ~/xlurm && xbatch $*" 2>&1) ;;
    esac
    awk '/Submitted batch job/ {print $4}' <<<"$out" | grep . || fail "$system: $*: $out"
}
# idle SYSTEM: no job of alice's is pending or running.
idle() {
    case $1 in
        slurm) [ -z "$(squeue -h -u alice)" ] ;;
        xlurm) [ "$(as_user alice xqueue --mine | awk 'NR > 1' | wc -l)" = 0 ] ;;
    esac
}
# same WHAT: ~/slurm/WHAT and ~/xlurm/WHAT, with each side's IDs named, agree.
same() {
    local s x
    s=$(cat "/home/alice/slurm/$1"); x=$(cat "/home/alice/xlurm/$1")
    note "$1: $(tr '\n' '|' <<<"$x")"
    [ "$s" = "$x" ] || { diff <(echo "$s") <(echo "$x") || true; fail "$1 differs between Slurm (<) and xlurm (>)"; }
}

as_user_sh alice 'rm -rf ~/slurm ~/xlurm; mkdir -p ~/slurm ~/xlurm
cat > ~/slurm/sweep.sh <<"EOF"
#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=1-5:2%2
#SBATCH --cpus-per-task=1
#SBATCH --mem=100M
#SBATCH --output=sweep-%A_%a.out
echo "task $SLURM_ARRAY_TASK_ID count $SLURM_ARRAY_TASK_COUNT min $SLURM_ARRAY_TASK_MIN max $SLURM_ARRAY_TASK_MAX step $SLURM_ARRAY_TASK_STEP"
echo "name $SLURM_JOB_NAME cpus $SLURM_CPUS_PER_TASK mem $SLURM_MEM_PER_NODE nodes $SLURM_JOB_NUM_NODES list $SLURM_JOB_NODELIST"
EOF
cat > ~/slurm/env.sh <<"EOF"
#!/bin/bash
#SBATCH --job-name=envcheck
#SBATCH --cpus-per-task=2
#SBATCH --mem=300M
#SBATCH --output=env.out
env | grep "^SLURM_" | sort
EOF
cat > ~/slurm/step.sh <<"EOF"
#!/bin/bash
#SBATCH --cpus-per-task=1
#SBATCH --mem=50M
#SBATCH --output=/dev/null
[ "$1" = a ] && sleep 3
echo "$1" >> order.txt
exit "${2:-0}"
EOF
cp ~/slurm/*.sh ~/xlurm/'

check "an array (1-5:2%2): the same tasks, variables and -o %A_%a files"
for system in slurm xlurm; do
    id=$(run "$system" sweep.sh)
    echo "$id" >"/home/alice/$system/sweep.id"
    note "$system: array $id"
done
wait_for "idle slurm && idle xlurm" 240 1 || fail "the arrays did not finish: $(squeue -u alice; as_user alice xqueue)"
for system in slurm xlurm; do
    id=$(cat "/home/alice/$system/sweep.id")
    (cd "/home/alice/$system" && for f in sweep-*.out; do
        echo "${f/$id/A}: $(tr '\n' '|' <"$f")"
    done) >"/home/alice/$system/sweep.txt"
done
same sweep.txt

check "a dependency chain: b afterok:a, c afterany:b, whatever their order in time"
for system in slurm xlurm; do
    a=$(run "$system" step.sh a)
    b=$(run "$system" "-d afterok:$a" step.sh b)
    c=$(run "$system" "--dependency=afterany:$b" step.sh c)
    printf 'a %s\nb %s\nc %s\n' "$a" "$b" "$c" >>"/home/alice/$system/ids"
done
wait_for "idle slurm && idle xlurm" 180 1 || fail "the chains did not finish: $(squeue -u alice; as_user alice xqueue)"
same order.txt

check "a job's Slurm variables: every one xlurm sets, Slurm sets to the same value"
for system in slurm xlurm; do
    id=$(run "$system" env.sh)
    echo "$id" >"/home/alice/$system/env.id"
done
wait_for "idle slurm && idle xlurm" 120 1 || fail "the env jobs did not finish"
for system in slurm xlurm; do
    id=$(cat "/home/alice/$system/env.id")
    # The job's ID and where it was submitted from differ by construction.
    sed -e "s/=$id\$/=ID/" -e "s|=/home/alice/$system\$|=SUBMIT_DIR|" "/home/alice/$system/env.out" |
        grep -v '^SLURM_CONF=' >"/home/alice/$system/env.txt"
done
export LC_ALL=C
names() { cut -d= -f1 "/home/alice/$1/env.txt" | sort; }
# Slurm sets SLURM_NTASKS and SLURM_NPROCS only when -n is given; xlurm always
# (1: one task), on purpose (src/daemon/job_env.rs, SLURM_VARIABLES).
invented=$(join -v 2 <(names slurm) <(names xlurm) | { grep -vx -e SLURM_NTASKS -e SLURM_NPROCS || true; } | tr '\n' ' ')
[ -z "$invented" ] || fail "xlurm sets variables Slurm does not set for the same script: $invented"
for system in slurm xlurm; do
    join -t= <(sort -t= -k1,1 "/home/alice/$system/env.txt") <(join <(names slurm) <(names xlurm)) >"/home/alice/$system/env.common"
done
same env.common
note "Slurm also sets: $(join -v 1 <(names slurm) <(names xlurm) | tr '\n' ' ')"

check "afterok on a job that failed: the dependent waits, DependencyNeverSatisfied"
declare -A dependent
for system in slurm xlurm; do
    bad=$(run "$system" step.sh bad 3)
    dependent[$system]=$(run "$system" "-d afterok:$bad" step.sh never)
    printf 'bad %s\nnever %s\n' "$bad" "${dependent[$system]}" >>"/home/alice/$system/ids"
done
reason_slurm() { squeue -h -j "${dependent[slurm]}" -o %r 2>/dev/null; }
reason_xlurm() { as_user alice xlurm queue "${dependent[xlurm]}" --json | grep -o '"reason": *"[A-Za-z]*' | sed 's/.*"//'; }
wait_for '[ "$(reason_slurm)" = DependencyNeverSatisfied ]' 120 1 || fail "Slurm's reason: $(reason_slurm)"
wait_for '[ "$(reason_xlurm)" = DependencyNeverSatisfied ]' 60 1 || fail "xlurm's reason: $(reason_xlurm)"
note "both: DependencyNeverSatisfied (Slurm job ${dependent[slurm]}, xlurm job ${dependent[xlurm]})"
scancel "${dependent[slurm]}"
as_user alice xcancel "${dependent[xlurm]}" >/dev/null
grep -qx never /home/alice/slurm/order.txt /home/alice/xlurm/order.txt && fail "a dependent of a failed job ran"

check "every job's final state, side by side"
wait_for "idle slurm && idle xlurm" 60 1 || fail "jobs left: $(squeue -u alice; as_user alice xqueue)"
state_slurm() { scontrol show job -o "$1" | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2; }
state_xlurm() { as_user alice xlurm queue "$1" --json | grep -o '"state": *"[A-Z_]*' | sed 's/.*"//'; }
for system in slurm xlurm; do
    arr=$(cat "/home/alice/$system/sweep.id")
    { for i in 1 3 5; do echo "sweep_$i ${arr}_$i"; done; cat "/home/alice/$system/ids"; } |
        while read -r name id; do echo "$name $("state_$system" "$id")"; done >"/home/alice/$system/states.txt"
done
same states.txt
exit 0
