# Helpers for VM scenarios (tests/vm/scenarios/*.sh). Source it first thing:
#   . "$XLURM_VM_LIB"
# Scenarios run as root inside the VM with `bash -euo pipefail`, cwd = the staged project.

# Print what is being checked.
check() { printf '== %s\n' "$*"; }
note() { printf '   %s\n' "$*"; }

# fail MSG: stop the scenario.
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

# assert_eq EXPECTED ACTUAL MSG
assert_eq() {
    if [ "$1" != "$2" ]; then
        fail "${3:-values differ}: expected [$1], got [$2]"
    fi
    note "ok: ${3:-equal} ($2)"
}

# assert_ne UNEXPECTED ACTUAL MSG
assert_ne() {
    if [ "$1" = "$2" ]; then fail "${3:-values equal}: got [$2]"; fi
    note "ok: ${3:-differs} ($2)"
}

# assert_contains HAYSTACK NEEDLE MSG
assert_contains() {
    case $1 in
        *"$2"*) note "ok: ${3:-contains} [$2]" ;;
        *) printf '%s\n' "---- text searched ----" "$1" "----" >&2
           fail "${3:-missing text}: [$2] not found" ;;
    esac
}

# assert_not_contains HAYSTACK NEEDLE MSG
assert_not_contains() {
    case $1 in
        *"$2"*) printf '%s\n' "---- text searched ----" "$1" "----" >&2
                fail "${3:-unexpected text}: [$2] found" ;;
        *) note "ok: ${3:-does not contain} [$2]" ;;
    esac
}

# assert_ok CMD...: the command must succeed. assert_fails CMD...: it must fail.
assert_ok() { "$@" || fail "command failed ($?): $*"; note "ok: $*"; }
assert_fails() { if "$@"; then fail "command unexpectedly succeeded: $*"; fi; note "ok (fails as expected): $*"; }

# wait_for CMD TIMEOUT [INTERVAL]: evaluate the shell string CMD until it succeeds;
# fail the scenario after TIMEOUT seconds (default 30).
wait_for() {
    local cmd=$1 limit=${2:-30} step=${3:-0.2} end
    end=$(( $(date +%s) + limit ))
    until eval "$cmd"; do
        [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${limit}s waiting for: $cmd"
        sleep "$step"
    done
}

# as_user USER CMD...: run CMD as USER with a fresh login-like environment (HOME, USER,
# LOGNAME, SHELL, PATH), the user's groups, in their home directory, without PAM or a
# logind session (setpriv). Its exit status is returned.
as_user() {
    local u=$1 home
    shift
    home=$(getent passwd "$u" | cut -d: -f6) || fail "no such user: $u"
    (cd "$home" && setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups --reset-env \
        env LANG=C.UTF-8 "$@")
}

# as_user_sh USER 'SHELL STRING': as_user with a bash -c string.
as_user_sh() { local u=$1; shift; as_user "$u" bash -c "$1"; }

# unit_prop UNIT PROPERTY: one property's value (systemctl show).
unit_prop() { systemctl show -p "$2" --value "$1"; }

# wait_unit_state UNIT 'STATE...' [TIMEOUT]: wait until the unit's SubState is one of STATEs.
wait_unit_state() {
    local unit=$1 states=$2 limit=${3:-60}
    wait_for "case \" $states \" in *\" \$(unit_prop $unit SubState) \"*) true;; *) false;; esac" "$limit"
}

# forget_unit UNIT: stop it and clear a failed state so the name can be reused.
forget_unit() {
    systemctl stop "$1" 2>/dev/null || true
    systemctl reset-failed "$1" 2>/dev/null || true
}

# need_bin NAME: fail clearly when a project binary was not installed.
need_bin() {
    command -v "$1" >/dev/null || fail "$1 is not installed in the VM (binaries not staged? run without XLURM_VM_SKIP_BUILD=1 or build target/release first)"
}

# journal_of UNIT: the unit's journal lines (message text only).
journal_of() { journalctl --no-pager -q -o cat -u "$1"; }

# xlurmd's D-Bus API for busctl: "${XB[@]}" METHOD SIGNATURE ARGS... calls a Scheduler1
# method (as root; as_user USER "${XB[@]}" ... as USER).
XD=(org.xlurm.Scheduler1 /org/xlurm/Scheduler1 org.xlurm.Scheduler1)
XB=(busctl call --timeout=60 -- "${XD[@]}")

# job_state ID: the job's state (GetJob as root), e.g. RUNNING.
job_state() { "${XB[@]}" GetJob t "$1" | grep -o '"state" s "[A-Z_]*"' | awk '{print $3}' | tr -d '"'; }

# active_ids USER [STATE]: IDs of USER's jobs in the queue (in STATE only, if given).
active_ids() { xqueue --limit 0 | awk -v u="$1" -v s="${2:-}" 'NR > 1 && $2 == u && (s == "" || $4 == s) {print $1}'; }

# xlurmd_owner: the unique bus name that owns org.xlurm.Scheduler1 now.
xlurmd_owner() { busctl status org.xlurm.Scheduler1 | sed -n 's/^UniqueName=//p'; }

# ms T0_NS T1_NS: milliseconds from T0 to T1 (both `date +%s%N`).
ms() { echo $(( ($2 - $1) / 1000000 )); }

# median: the middle of the numbers on stdin (the upper middle of an even count).
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# latency_runs N: submit-to-running of a bare `systemd-run --wait` (root, User=alice)
# and of alice's `xrun -g 0`, N of each, alternated: each from typing the command to
# its job's process running (the job writes the time). Sets LAT_BARE and LAT_XRUN
# (arrays, ms, in run order). VM 11's latency check and probe 98 use it.
latency_runs() {
  local i t0
  LAT_BARE=(); LAT_XRUN=()
  for ((i = 0; i < $1; i++)); do
    rm -f /tmp/lat-b /tmp/lat-x
    t0=$(date +%s%N); as_user root systemd-run --wait -q -p User=alice /bin/sh -c 'date +%s%N >/tmp/lat-b'
    LAT_BARE+=("$(ms "$t0" "$(cat /tmp/lat-b)")")
    t0=$(date +%s%N); as_user alice xrun -g 0 /bin/sh -c 'date +%s%N >/tmp/lat-x' 2>/dev/null
    LAT_XRUN+=("$(ms "$t0" "$(cat /tmp/lat-x)")")
  done
  rm -f /tmp/lat-b /tmp/lat-x
}
