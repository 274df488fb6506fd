#!/bin/bash
# The README's "Install and upgrade" and "Using it" as a new user follows them: the .deb
# (installed by the rig, tests/vm/guest-install.sh) leaves xlurmd enabled and active; xinfo,
# xrun, xbatch (--wrap, and a script file with #SBATCH lines and an argument), xqueue (plain,
# one job, --all --mine) and xlurm log work; an upgrade with the README's apt command
# restarts xlurmd while a job keeps running and reports its exit code; man pages and
# completions are there; remove stops xlurmd and keeps /var/lib/xlurm, purge removes it;
# packaging/install.sh installs, runs and uninstalls from source; the package goes back on
# at the end with the README's exact apt command (it starts xlurmd with nothing else typed).
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

# The README's install command, word for word (tests/vm/run stages README.md): the .deb
# that packaging/build-deb.sh makes must have the name the README gives, and goes where
# the README says it is (target/debian/); the upgrade goes next to it.
[ -f README.md ] || fail "README.md not staged (tests/vm/run copies it into the share)"
readme_install=$(grep -m1 -E '^sudo apt install \./target/debian/xlurm_[^ ]+_amd64\.deb$' README.md) \
    || fail "README.md has no 'sudo apt install ./target/debian/xlurm_..._amd64.deb' line"
note "README: $readme_install"
mkdir -p target/debian
assert_eq "./target/debian/$(basename "${debs[0]}")" "${readme_install#sudo apt install }" \
    "the README's .deb is the one packaging/build-deb.sh builds"
cp "${debs[0]}" "${upgrade[0]}" target/debian/
new_deb=./target/debian/$(basename "${upgrade[0]}")

# apt as the README says, as root (the image has no sudo; a user would answer the prompt,
# -y does), without its warning about scripts; fails when apt fails.
apt_() { apt "$@" 2>&1 | { grep -v 'does not have a stable CLI' || true; }; }
readme_apt() {   # readme_apt 'sudo apt install ./x.deb': that command, as root, with -y
    local words
    read -r -a words <<<"${1#sudo }"
    [ "${words[0]} ${words[1]}" = "apt install" ] || fail "not an apt install command: $1"
    note "+ ${words[*]:0:2} -y ${words[*]:2}"
    apt_ install -y "${words[@]:2}"
}
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
         /usr/lib/systemd/system/xlurm.slice /usr/lib/systemd/system/xlurm-nodev.slice \
         /usr/share/dbus-1/system.d/org.xlurm.Scheduler1.conf \
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

check "xbatch --wrap, then xqueue and xlurm log"
out=$(as_user alice xbatch --wrap 'echo batch-90' 2>&1); echo "$out"
id=$(job_id "$out")
[ -n "$id" ] || fail "no job ID from xbatch"
wait_for "as_user alice xqueue $id | grep 'State: COMPLETED' >/dev/null" 60
out=$(as_user alice xqueue --all --mine); echo "$out"
assert_contains "$out" "$id"
out=$(as_user alice xlurm log "$id"); echo "$out"
assert_eq batch-90 "$out" "xlurm log $id prints the job's output"

check "xbatch -t 2h job.sh arg1: a script with #SBATCH lines, as the README shows"
rm -f /home/alice/go-tour
# As written for Slurm: values as the next word and attached, a directive xlurm ignores.
as_user_sh alice 'cat > job.sh' <<'SCRIPT'
#!/bin/bash
#SBATCH --job-name tour-90
#SBATCH -c 1
#SBATCH --mem 300
#SBATCH --time=10
#SBATCH --partition=debug   # Slurm-only: a warning
while [ ! -e ~/go-tour ]; do sleep 0.2; done
echo "job.sh ran with $1 in $PWD"
SCRIPT
rc=0; out=$(as_user alice xbatch -t 2h job.sh arg1 2>&1) || rc=$?
echo "$out"
assert_eq 0 "$rc" "xbatch exit code"
assert_contains "$out" "warning: #SBATCH --partition=debug is not supported here and was ignored"
id=$(job_id "$out")
[ -n "$id" ] || fail "no job ID from xbatch job.sh"
wait_for "as_user alice xqueue $id | grep 'State: RUNNING' >/dev/null" 60

check "xqueue: the running job in the active-jobs table"
out=$(as_user alice xqueue); echo "$out"
assert_contains "$(head -n 1 <<<"$out")" "ID USER" "xqueue's header"
row=$(awk -v id="$id" '$1 == id' <<<"$out")
[ -n "$row" ] || fail "job $id is not in plain xqueue's output"
assert_eq "alice tour-90 RUNNING" "$(awk '{print $2, $3, $4}' <<<"$row")" "xqueue's row for job $id"
out=$(as_user bob xqueue); echo "$out"
assert_contains "$out" "tour-90" "bob sees alice's job in the summary"
json=$(as_user alice xqueue "$id" --json)
assert_contains "$json" '"time_limit": 7200' "-t 2h wins over #SBATCH --time=10"
assert_contains "$json" "\"mem\": $((300 << 20))" "#SBATCH --mem 300 is 300 MB"
assert_contains "$json" '"cpus": 1'
as_user alice touch /home/alice/go-tour
wait_for "as_user alice xqueue $id | grep 'State: COMPLETED' >/dev/null" 60
out=$(as_user alice xlurm log "$id"); echo "$out"
assert_eq "job.sh ran with arg1 in /home/alice" "$out" "the script ran with its argument"
out=$(as_user alice xqueue); echo "$out"
[ -z "$(awk -v id="$id" '$1 == id' <<<"$out")" ] || fail "finished job $id still in plain xqueue"
rm -f /home/alice/go-tour /home/alice/job.sh

check "upgrade to $v2 with a job running: xlurmd restarts, the job keeps running"
rm -f /home/alice/go-90
out=$(as_user alice xbatch -t 300 --wrap 'while [ ! -e ~/go-90 ]; do sleep 0.2; done; exit 5' 2>&1); echo "$out"
id=$(job_id "$out")
wait_for "as_user alice xqueue $id | grep 'State: RUNNING' >/dev/null" 60
job_pid=$(systemctl show -p MainPID --value "xlurm-job-$id.service")
dpid=$(daemon_pid)
note "job $id: unit PID $job_pid; xlurmd PID $dpid"
readme_apt "sudo apt install $new_deb"
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

check "the README's '$readme_install' then its first xrun: xlurmd enabled and active with nothing else typed"
readme_apt "$readme_install"
assert_contains "$(dpkg -s xlurm)" "Status: install ok installed"
assert_contains "$(dpkg -s xlurm)" "Version: $v1"
assert_eq enabled "$(systemctl is-enabled xlurmd)" "xlurmd enabled"
assert_eq active "$(systemctl is-active xlurmd)" "xlurmd active"
rc=0; out=$(as_user alice xrun -g 0 echo hello 2>&1) || rc=$?
echo "$out"
assert_eq 0 "$rc" "xrun after reinstall"
assert_contains "$out" "hello"
