#!/bin/bash
# Install the staged project into the VM the way a user would (tests/vm/guest-runner.sh calls
# it before the scenarios):
#   - with a staged package (debs/xlurm_*.deb, built by tests/vm/run with
#     packaging/build-deb.sh): `apt-get install ./debs/xlurm_*.deb`, as the README says; the
#     package's maintainer scripts reload systemd and D-Bus and enable and start xlurmd;
#   - otherwise the plain files: binaries to /usr/bin (+ the five command names), units,
#     bus and polkit files, then daemon-reload and a D-Bus reload (xlurmd is not started).
#   guest-install.sh SRC    (SRC holds debs/ or target/release/, units/, dbus/, packaging/)
set -euo pipefail
src=${1:?usage: guest-install.sh SRC}
cd "$src"
shopt -s nullglob globstar

debs=(debs/xlurm_*.deb)
if [ ${#debs[@]} -gt 1 ]; then
    echo "more than one package staged: ${debs[*]}" >&2
    exit 1
fi
if [ ${#debs[@]} = 1 ]; then
    # The image is minimised: its dpkg config (/etc/dpkg/dpkg.cfg.d/99mmdebstrap) drops
    # /usr/share/man and /usr/share/doc. Keep xlurm's, so the scenarios can check them
    # (read after 99mmdebstrap, so these includes win; dpkg re-creates an excluded
    # directory only when an include pattern's part before its first wildcard is a prefix
    # of the directory, hence man[18]).
    printf '%s\n' '# tests/vm/guest-install.sh: keep the files of the xlurm package' \
        'path-include=/usr/share/man/man[18]/x*' \
        'path-include=/usr/share/doc/xlurm/*' >/etc/dpkg/dpkg.cfg.d/zz-xlurm-vm
    echo "apt-get install ./${debs[0]}"
    # No network in the guest: every dependency must already be in the image.
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "./${debs[0]}"
    dpkg -s xlurm | grep -E '^(Status|Version):'
    exit 0
fi

n=0
put() {   # put MODE FILE DESTDIR
    install -D -m "$1" "$2" "$3/$(basename "$2")"
    echo "installed $3/$(basename "$2")"
    n=$(( n + 1 ))
}

if [ -x target/release/xlurmd ] && [ -x target/release/xlurm ]; then
    put 0755 target/release/xlurmd /usr/bin
    put 0755 target/release/xlurm /usr/bin
    for l in xrun xbatch xqueue xcancel xinfo; do
        ln -sfn xlurm "/usr/bin/$l"
        echo "linked /usr/bin/$l -> xlurm"
    done
else
    echo "no binaries staged (target/release/xlurmd, xlurm): skipped"
fi

for f in units/*; do if [ -f "$f" ]; then put 0644 "$f" /usr/lib/systemd/system; fi; done
for f in dbus/*.conf; do put 0644 "$f" /usr/share/dbus-1/system.d; done
for f in dbus/*.service; do put 0644 "$f" /usr/share/dbus-1/system-services; done
for f in dbus/*.xml; do put 0644 "$f" /usr/share/dbus-1/interfaces; done
for f in dbus/**/*.policy packaging/**/*.policy; do put 0644 "$f" /usr/share/polkit-1/actions; done
for f in packaging/polkit/**/*.rules; do put 0644 "$f" /etc/polkit-1/rules.d; done
echo "$n file(s) installed"

systemctl daemon-reload
systemctl reload dbus
echo "daemon-reload, dbus reloaded"
