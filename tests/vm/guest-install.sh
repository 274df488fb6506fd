#!/bin/bash
# Install the staged project into the VM the way a user install would (tests/vm/guest-runner.sh
# calls it before the scenarios). A packaging issue later replaces this with a .deb.
#   guest-install.sh SRC    (SRC holds target/release/, units/, dbus/, packaging/)
set -euo pipefail
src=${1:?usage: guest-install.sh SRC}
cd "$src"
shopt -s nullglob globstar

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
