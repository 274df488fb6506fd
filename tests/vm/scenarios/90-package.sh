#!/bin/bash
# The README's "Install and upgrade" as a new user follows it: the .deb (installed by the rig,
# tests/vm/guest-install.sh) leaves xlurmd enabled and active; xinfo, xrun, xbatch, xqueue
# work; an upgrade restarts xlurmd while a job keeps running and reports its exit code;
# man pages and completions are there; remove stops xlurmd and keeps /var/lib/xlurm, purge
# removes it; packaging/install.sh installs, runs and uninstalls from source; the package
# goes back on at the end (installing it starts xlurmd with nothing else typed).
# timeout: 600
set -euo pipefail
. "$XLURM_VM_LIB"

export DEBIAN_FRONTEND=noninteractive
shopt -s nullglob
debs=(debs/xlurm_*.deb)
upgrade=(debs/upgrade/xlurm_*.deb)
[ ${#debs[@]} = 1 ] || fail "no package staged (debs/xlurm_*.deb): tests/vm/run builds it unless XLURM_VM_SKIP_BUILD=1"
[ ${#upgrade[@]} = 1 ] || fail "no upgrade package staged (debs/upgrade/xlurm_*.deb)"
v1=$(dpkg-deb -f "${debs[0]}" Version)
v2=$(dpkg-deb -f "${upgrade[0]}" Version)
note "packages: $v1, upgrade $v2"

# apt, as the README says (without its warning about scripts); fails when apt fails
apt_() { apt "$@" 2>&1 | { grep -v 'does not have a stable CLI' || true; }; }
apt_install() { apt_ install -y --no-install-recommends "$@"; }
daemon_pid() { systemctl show -p MainPID --value xlurmd; }
job_id() { awk '/Submitted batch job/ {print $4}' <<<"$1"; }
# (grep without -q reads xqueue's whole output: xlurm panics on a closed pipe)

check "dpkg -s xlurm: installed, version $v1"
st=$(dpkg -s xlurm)
assert_contains "$st" "Status: install ok installed"
assert_contains "$st" "Version: $v1"
check "xlurmd is enabled and active after the install"
assert_eq enabled "$(systemctl is-enabled xlurmd)" "xlurmd enabled"
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd active"

check "the installed files"
for f in /usr/bin/xlurmd /usr/bin/xlurm /usr/lib/systemd/system/xlurmd.service \
         /usr/lib/systemd/system/xlurm.slice /usr/share/dbus-1/system.d/org.xlurm.Scheduler1.conf \
         /usr/share/dbus-1/system-services/org.xlurm.Scheduler1.service \
         /usr/share/dbus-1/interfaces/org.xlurm.Scheduler1.xml \
         /usr/share/polkit-1/actions/org.xlurm.scheduler.policy \
         /usr/share/doc/xlurm/examples/50-xlurm-admin.rules.example /usr/share/doc/xlurm/copyright; do
    [ -f "$f" ] || fail "$f missing"
done
for n in xrun xbatch xqueue xcancel xinfo; do
    assert_eq xlurm "$(readlink "/usr/bin/$n")" "/usr/bin/$n -> xlurm"
done
assert_eq "$(dpkg -L xlurm | grep -c '^/usr/share/man/man[18]/x.*\.gz$')" 7 "7 man pages listed by dpkg"

check "xinfo"
out=$(as_user alice xinfo); echo "$out"
assert_contains "$out" "node0"
assert_contains "$out" "node1"

check "xrun -g 0 echo hello"
rc=0; out=$(as_user alice xrun -g 0 echo hello 2>&1) || rc=$?
echo "$out"
assert_eq 0 "$rc" "xrun exit code"
assert_contains "$out" "hello"

check "xbatch --wrap, then xqueue"
out=$(as_user alice xbatch --wrap 'echo batch-90' 2>&1); echo "$out"
id=$(job_id "$out")
[ -n "$id" ] || fail "no job ID from xbatch"
wait_for "as_user alice xqueue $id | grep 'State: COMPLETED' >/dev/null" 60
out=$(as_user alice xqueue); echo "$out"
out=$(as_user alice xqueue --all --mine); echo "$out"
assert_contains "$out" "$id"

check "upgrade to $v2 with a job running: xlurmd restarts, the job keeps running"
rm -f /home/alice/go-90
out=$(as_user alice xbatch -t 300 --wrap 'while [ ! -e ~/go-90 ]; do sleep 0.2; done; exit 5' 2>&1); echo "$out"
id=$(job_id "$out")
wait_for "as_user alice xqueue $id | grep 'State: RUNNING' >/dev/null" 60
job_pid=$(systemctl show -p MainPID --value "xlurm-job-$id.service")
dpid=$(daemon_pid)
note "job $id: unit PID $job_pid; xlurmd PID $dpid"
apt_install "./${upgrade[0]}"
assert_contains "$(dpkg -s xlurm)" "Version: $v2" "upgraded"
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd active after the upgrade"
assert_ne "$dpid" "$(daemon_pid)" "xlurmd was restarted"
assert_eq "$job_pid" "$(systemctl show -p MainPID --value "xlurm-job-$id.service")" "the job's process survived"
assert_contains "$(as_user alice xqueue "$id")" "RUNNING"
as_user alice touch /home/alice/go-90
wait_for "as_user alice xqueue $id | grep 'State: FAILED' >/dev/null" 60
out=$(as_user alice xqueue "$id"); echo "$out"
assert_contains "$out" "Exit code: 5"
rm -f /home/alice/go-90

check "man xrun: the man pages are there and valid"
for p in man1/xlurm.1 man1/xrun.1 man1/xbatch.1 man1/xqueue.1 man1/xcancel.1 man1/xinfo.1 man8/xlurmd.8; do
    f=/usr/share/man/$p.gz
    [ -f "$f" ] || fail "$f missing"
    assert_ok gzip -t "$f"
    name=$(basename "$p"); name=${name%.*}; sec=${p##*.}
    head=$(zcat "$f" | grep -m1 '^\.TH')
    assert_contains "$head" ".TH ${name^^} $sec" "$p title"
    zcat "$f" | grep -q '^\.SH NAME' || fail "$p has no NAME section"
done
assert_contains "$(zcat /usr/share/man/man1/xrun.1.gz)" "EXIT STATUS"
command -v man >/dev/null || fail "man-db is missing from the image"
page=$(MANPAGER=cat man xrun 2>&1)
assert_contains "$page" "xrun"
assert_contains "$page" "EXIT STATUS" "man xrun renders the page"

check "shell completions"
for f in /usr/share/bash-completion/completions/{xlurm,xrun,xbatch,xqueue,xcancel,xinfo} \
         /usr/share/zsh/vendor-completions/_xlurm /usr/share/fish/vendor_completions.d/xlurm.fish; do
    [ -s "$f" ] || fail "$f missing"
done
assert_contains "$(bash -c '. /usr/share/bash-completion/completions/xrun && complete -p xrun')" "xrun"
check "xrun <TAB> completes options through bash-completion"
comp=$(bash -c '. /usr/share/bash-completion/bash_completion; . /usr/share/bash-completion/completions/xrun;
  COMP_WORDS=(xrun --ti); COMP_CWORD=1; COMP_LINE="xrun --ti"; COMP_POINT=${#COMP_LINE};
  fn=$(complete -p xrun | sed -E "s/.*-F ([^ ]+).*/\1/"); $fn xrun --ti xrun; printf "%s\n" "${COMPREPLY[@]}"')
echo "$comp"
assert_contains "$comp" "--time-limit"
assert_contains "$(bash -c '. /usr/share/bash-completion/completions/xlurm && complete -p xlurm')" "xlurm"

check "apt remove xlurm stops xlurmd and keeps /var/lib/xlurm"
[ -d /var/lib/xlurm ] || fail "/var/lib/xlurm missing before remove"
apt_ remove -y xlurm
assert_ne active "$(systemctl is-active xlurmd || true)" "xlurmd stopped"
[ -d /var/lib/xlurm ] || fail "/var/lib/xlurm removed by remove"
note "ok: /var/lib/xlurm kept: $(ls /var/lib/xlurm | tr '\n' ' ')"
[ ! -e /usr/bin/xlurm ] || fail "/usr/bin/xlurm still there"
[ ! -e /usr/bin/xrun ] && [ ! -L /usr/bin/xrun ] || fail "/usr/bin/xrun still there"
assert_contains "$(dpkg -s xlurm 2>&1)" "Status: deinstall ok config-files"

check "apt purge xlurm removes /var/lib/xlurm"
apt_ purge -y xlurm
[ ! -e /var/lib/xlurm ] || fail "/var/lib/xlurm still there after purge"
assert_fails dpkg -s xlurm

if [ -x target/release/xlurmd ] && [ -d target/generated ]; then
    check "from source: packaging/install.sh --no-build installs and starts xlurmd"
    assert_ok packaging/install.sh --no-build
    assert_eq enabled "$(systemctl is-enabled xlurmd)" "xlurmd enabled"
    assert_eq active "$(systemctl is-active xlurmd)" "xlurmd active"
    [ -f /usr/share/man/man1/xrun.1.gz ] || fail "xrun.1.gz not installed"
    rc=0; out=$(as_user alice xrun -g 0 echo hello 2>&1) || rc=$?
    echo "$out"
    assert_eq 0 "$rc" "xrun exit code"
    check "packaging/install.sh again (an upgrade) restarts xlurmd"
    dpid=$(daemon_pid)
    assert_ok packaging/install.sh --no-build
    assert_ne "$dpid" "$(daemon_pid)" "xlurmd was restarted"
    check "packaging/install.sh --uninstall keeps /var/lib/xlurm; --purge removes it"
    assert_ok packaging/install.sh --uninstall
    assert_ne active "$(systemctl is-active xlurmd || true)" "xlurmd stopped"
    [ ! -e /usr/bin/xlurm ] || fail "/usr/bin/xlurm still there"
    [ -d /var/lib/xlurm ] || fail "/var/lib/xlurm removed by --uninstall"
    assert_ok packaging/install.sh --purge
    [ ! -e /var/lib/xlurm ] || fail "/var/lib/xlurm still there after --purge"
else
    note "(no binaries staged: packaging/install.sh not tried)"
fi

check "apt install ./xlurm_$v1.deb: xlurmd enabled and active with nothing else typed"
apt_install "./${debs[0]}"
assert_contains "$(dpkg -s xlurm)" "Status: install ok installed"
assert_eq enabled "$(systemctl is-enabled xlurmd)" "xlurmd enabled"
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd active"
rc=0; as_user alice xrun -g 0 echo hello || rc=$?
assert_eq 0 "$rc" "xrun after reinstall"
