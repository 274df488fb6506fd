#!/bin/bash
# Install xlurm from this checkout on any systemd distribution: the same files in the same
# places as the Debian package (packaging/build-deb.sh), then daemon-reload, a D-Bus
# reload, and xlurmd enabled and started (restarted when it was running: an upgrade;
# jobs are systemd units of their own and keep running).
#
#   sudo packaging/install.sh              build (cargo, as the user who ran sudo), install, start
#   sudo packaging/install.sh --no-build   install what target/release and target/generated hold
#   sudo packaging/install.sh --uninstall  stop and disable xlurmd, remove its files;
#                                          the job state in /var/lib/xlurm is kept
#   sudo packaging/install.sh --purge      the same, and remove /var/lib/xlurm
#
# Needs root, systemd as PID 1 and cgroup v2 with the cpuset and memory controllers.
set -euo pipefail
shopt -s nullglob

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=install build=1
for arg in "$@"; do
    case $arg in
        --no-build) build=0 ;;
        --uninstall) mode=uninstall ;;
        --purge) mode=purge ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument $arg (valid: --no-build, --uninstall, --purge, --help)" >&2; exit 2 ;;
    esac
done

say() { printf 'install.sh: %s\n' "$*"; }
die() { printf 'install.sh: error: %s\n' "$*" >&2; exit 1; }

# Every path this script installs (the Debian package's list, Cargo.toml [package.metadata.deb]).
names=(xrun xbatch xqueue xcancel xinfo)
zsh_dir=/usr/share/zsh/vendor-completions           # Debian's; elsewhere zsh's own default:
[ -d "$zsh_dir" ] || zsh_dir=/usr/share/zsh/site-functions
files=(
    /usr/bin/xlurmd /usr/bin/xlurm
    /usr/lib/systemd/system/xlurmd.service /usr/lib/systemd/system/xlurm.slice
    /usr/lib/systemd/system/accel.slice /usr/lib/systemd/system/xlurm-nodev.slice
    /usr/lib/systemd/system/xlurm-metrics.service /usr/lib/systemd/system/xlurm-metrics.timer
    /usr/share/dbus-1/system.d/org.xlurm.Scheduler1.conf
    /usr/share/dbus-1/system-services/org.xlurm.Scheduler1.service
    /usr/share/polkit-1/actions/org.xlurm.scheduler.policy
    /usr/share/doc/xlurm/examples/50-xlurm-admin.rules.example /usr/share/doc/xlurm/README.md
    /usr/share/man/man1/xlurm.1.gz /usr/share/man/man8/xlurmd.8.gz
)
for f in /usr/share/dbus-1/interfaces/org.xlurm.*.xml "$root"/dbus/*.xml; do   # Scheduler1, Job1
    files+=("/usr/share/dbus-1/interfaces/$(basename "$f")")
done
for n in xlurm "${names[@]}"; do
    [ "$n" = xlurm ] || files+=("/usr/bin/$n" "/usr/share/man/man1/$n.1.gz")
    files+=("/usr/share/bash-completion/completions/$n" "$zsh_dir/_$n"
            "/usr/share/fish/vendor_completions.d/$n.fish")
done

# --- refusals ----------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || die "run as root: sudo packaging/install.sh${*:+ $*}"
if command -v dpkg-query >/dev/null \
    && dpkg-query -W -f '${db:Status-Status}' xlurm 2>/dev/null | grep -qx installed; then
    die "xlurm is installed as a Debian package (dpkg -s xlurm): upgrade it with apt install ./xlurm_*.deb, remove it with apt remove xlurm"
fi
systemd=0
[ -d /run/systemd/system ] && systemd=1
if [ "$mode" = install ]; then
    [ $systemd = 1 ] || die "systemd is not running as init here (no /run/systemd/system): xlurm runs every job as a systemd unit and needs systemd as PID 1"
    ctl=/sys/fs/cgroup/cgroup.controllers
    [ -f "$ctl" ] || die "no cgroup v2 here ($ctl is missing: cgroup v1 or hybrid): xlurm pins jobs with the cpuset and memory controllers of cgroup v2; boot with systemd.unified_cgroup_hierarchy=1"
    for c in cpuset memory; do
        grep -qw "$c" "$ctl" || die "the cgroup v2 controller '$c' is not available ($ctl: $(cat "$ctl")): xlurm needs cpuset and memory"
    done
fi

reload_bus() {
    if systemctl reload dbus.service 2>/dev/null; then
        say "reloaded the D-Bus configuration"
    else
        say "warning: could not reload D-Bus (systemctl reload dbus); it picks up the new files by itself shortly"
    fi
}

# --- uninstall, purge --------------------------------------------------------------------
if [ "$mode" != install ]; then
    if [ $systemd = 1 ]; then
        say "stopping and disabling xlurmd.service (running jobs are units of their own and keep running)"
        systemctl disable --now xlurmd.service 2>/dev/null || true
    fi
    removed=0
    for f in "${files[@]}"; do
        if [ -e "$f" ] || [ -L "$f" ]; then rm -f "$f"; removed=$((removed + 1)); fi
    done
    rmdir /usr/share/doc/xlurm/examples /usr/share/doc/xlurm 2>/dev/null || true
    say "removed $removed file(s)"
    if [ $systemd = 1 ]; then
        systemctl daemon-reload
        say "systemctl daemon-reload"
        reload_bus
    fi
    if [ "$mode" = purge ]; then
        rm -rf /var/lib/xlurm
        say "removed the job state in /var/lib/xlurm"
    elif [ -d /var/lib/xlurm ]; then
        say "kept the job state in /var/lib/xlurm (remove it with: sudo packaging/install.sh --purge)"
    fi
    exit 0
fi

# --- build ---------------------------------------------------------------------------------
target=${CARGO_TARGET_DIR:-$root/target}
if [ $build = 1 ]; then
    # Build as the user who ran sudo (their toolchain, their target/), not as root.
    as=()
    if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
        home=$(getent passwd "$SUDO_USER" | cut -d: -f6)
        as=(sudo -u "$SUDO_USER" -H env "PATH=$home/.cargo/bin:$PATH")
    else
        PATH=$HOME/.cargo/bin:$PATH
    fi
    "${as[@]}" sh -c 'command -v cargo' >/dev/null \
        || die "cargo not found${SUDO_USER:+ for $SUDO_USER}: install Rust (https://rustup.rs), or build first (cargo build --release --locked) and use --no-build"
    say "building: cargo build --release --locked --bins${SUDO_USER:+ (as $SUDO_USER)}"
    (cd "$root" && "${as[@]}" cargo build --release --locked --bins) || die "cargo build failed"
fi
gen=$target/generated
for f in "$target/release/xlurmd" "$target/release/xlurm" "$gen/man/xlurm.1" "$gen/man/xlurmd.8" \
         "$gen/completions/bash/xlurm"; do
    [ -e "$f" ] || die "$f is missing: build first (cargo build --release --locked), or run without --no-build"
done

# --- install -----------------------------------------------------------------------------
was_active=0
systemctl is-active -q xlurmd.service && was_active=1
say "installing to /usr"
n=0
put() {   # put MODE SRC DEST
    install -D -m "$1" "$2" "$3.xlurm-new"
    mv -f "$3.xlurm-new" "$3"     # atomic: a running xlurmd keeps its old binary
    n=$((n + 1))
}
gz() {    # gz SRC DEST.gz
    mkdir -p "$(dirname "$2")"
    gzip -9n -c "$1" >"$2.xlurm-new"
    chmod 0644 "$2.xlurm-new"
    mv -f "$2.xlurm-new" "$2"
    n=$((n + 1))
}
put 0755 "$target/release/xlurmd" /usr/bin/xlurmd
put 0755 "$target/release/xlurm" /usr/bin/xlurm
for l in "${names[@]}"; do ln -sfn xlurm "/usr/bin/$l"; n=$((n + 1)); done
put 0644 "$root/units/xlurmd.service" /usr/lib/systemd/system/xlurmd.service
put 0644 "$root/units/xlurm.slice" /usr/lib/systemd/system/xlurm.slice
put 0644 "$root/units/accel.slice" /usr/lib/systemd/system/accel.slice
put 0644 "$root/units/xlurm-nodev.slice" /usr/lib/systemd/system/xlurm-nodev.slice
put 0644 "$root/units/xlurm-metrics.service" /usr/lib/systemd/system/xlurm-metrics.service
put 0644 "$root/units/xlurm-metrics.timer" /usr/lib/systemd/system/xlurm-metrics.timer
put 0644 "$root/dbus/org.xlurm.Scheduler1.conf" /usr/share/dbus-1/system.d/org.xlurm.Scheduler1.conf
put 0644 "$root/dbus/org.xlurm.Scheduler1.service" /usr/share/dbus-1/system-services/org.xlurm.Scheduler1.service
for f in "$root"/dbus/*.xml; do put 0644 "$f" "/usr/share/dbus-1/interfaces/$(basename "$f")"; done
put 0644 "$root/dbus/org.xlurm.scheduler.policy" /usr/share/polkit-1/actions/org.xlurm.scheduler.policy
put 0644 "$root/packaging/polkit/50-xlurm-admin.rules.example" /usr/share/doc/xlurm/examples/50-xlurm-admin.rules.example
if [ -f "$root/README.md" ]; then put 0644 "$root/README.md" /usr/share/doc/xlurm/README.md; fi
gz "$gen/man/xlurmd.8" /usr/share/man/man8/xlurmd.8.gz
for n_ in xlurm "${names[@]}"; do
    gz "$gen/man/$n_.1" "/usr/share/man/man1/$n_.1.gz"
    put 0644 "$gen/completions/bash/$n_" "/usr/share/bash-completion/completions/$n_"
    put 0644 "$gen/completions/zsh/_$n_" "$zsh_dir/_$n_"
    put 0644 "$gen/completions/fish/$n_.fish" "/usr/share/fish/vendor_completions.d/$n_.fish"
done
say "installed $n file(s): /usr/bin/{xlurmd,xlurm,$(IFS=,; echo "${names[*]}")}, units, D-Bus and polkit files, man pages, completions"

systemctl daemon-reload
say "systemctl daemon-reload"
reload_bus
# A removed (not purged) Debian package leaves a mask on xlurmd.service; drop only that one.
if command -v deb-systemd-helper >/dev/null; then deb-systemd-helper unmask xlurmd.service >/dev/null 2>&1 || true; fi
systemctl enable -q xlurmd.service
say "enabled xlurmd.service"
if [ $was_active = 1 ]; then
    say "restarting xlurmd (an upgrade: running jobs keep running, xlurmd re-adopts them)"
    systemctl restart xlurmd.service || die "xlurmd did not restart: journalctl -u xlurmd"
else
    say "starting xlurmd"
    systemctl start xlurmd.service || die "xlurmd did not start: journalctl -u xlurmd"
fi
systemctl is-active -q xlurmd.service || die "xlurmd is not active: journalctl -u xlurmd"
say "xlurmd is enabled and active; try: xrun -g 0 echo hello"
