#!/bin/bash
# Runs inside the VM (started by the image's xlurm-vm-test.service through the 9p share):
# copies the staged project to local disk, runs guest-install.sh, then every scenario in
# run-list under `timeout`, writing NAME.log and NAME.result ("STATUS RC SECONDS") into
# the share's results/ folder. tests/vm/run reads them on the host.
set -u
share=${1:-/mnt/xlurm}
res=$share/results
src=/var/lib/xlurm-test
mkdir -p "$res"
cut -d' ' -f1 /proc/uptime >"$res/started"
echo "xlurm-vm: runner started at uptime $(cat "$res/started")s" >&2

put() { printf '%s\n' "$2" >"$res/.$1.tmp" && mv -f "$res/.$1.tmp" "$res/$1"; }
now_ns() { date +%s%N; }
dur() { local d=$(( $(now_ns) - $1 )); printf '%d.%d' $(( d / 1000000000 )) $(( d % 1000000000 / 100000000 )); }

rm -rf "$src"
mkdir -p "$src"
cp -a "$share/stage/." "$src/"
chmod 0755 "$src"

irc=0
bash "$src/tests/vm/guest-install.sh" "$src" >"$res/install.log" 2>&1 </dev/null || irc=$?
put install.rc "$irc"

export XLURM_VM=1 XLURM_VM_SRC=$src XLURM_VM_LIB=$src/tests/vm/lib.sh
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
# Scenario knobs passed from the host (XLURM_LOAD_* variables).
[ -f "$src/tests/vm/scenario-env" ] && . "$src/tests/vm/scenario-env"
while read -r name limit; do
    [ -n "$name" ] || continue
    file=$src/tests/vm/scenarios/$name.sh
    echo "xlurm-vm: scenario $name (limit ${limit}s)" >&2
    : >"$res/$name.running"
    since=$(date +%s)
    t0=$(now_ns)
    rc=0
    (cd "$src" && XLURM_VM_SCENARIO=$name timeout -k 10 "$limit" bash -euo pipefail "$file") \
        >"$res/$name.log" 2>&1 </dev/null || rc=$?
    d=$(dur "$t0")
    case $rc in
        0) st=PASS ;;
        124|137) st=TIMEOUT ;;
        *) st=FAIL ;;
    esac
    echo "---- $st (exit $rc after ${d}s)" >>"$res/$name.log"
    if [ "$st" != PASS ]; then   # the journal of that time, for the post-mortem
        journalctl --no-pager -q -o short-monotonic --since "@$since" >"$res/$name.journal" 2>&1
    fi
    rm -f "$res/$name.running"
    put "$name.result" "$st $rc $d"
    echo "xlurm-vm: $st $name (${d}s)" >&2
done <"$src/tests/vm/run-list"
sync
put done ok
