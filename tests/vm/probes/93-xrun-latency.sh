#!/bin/bash
# Probe, not a CI scenario (issue 21): where xrun's submit-to-running time goes,
# against `systemd-run`'s. Every message on the system bus is recorded with its
# time (dbus-monitor --profile) while each command runs; each run prints the
# messages after the command started, in ms from the start, and when the job's
# process ran. Run it with:
#   XLURM_VM_SCENARIO_DIR=tests/vm/probes tests/vm/run 93-xrun-latency
# timeout: 600
set -euo pipefail
. "$XLURM_VM_LIB"
systemctl start xlurmd
runs=${XLURM_PROBE_RUNS:-4}
mon=/tmp/93-monitor.log
dbus-monitor --system --profile >"$mon" 2>/dev/null &
monpid=$!
sleep 2
# timeline T0_NS FROM_LINE: the messages since line FROM_LINE of the monitor's
# log, in ms after T0_NS (dbus-monitor --profile: type, time in s.us, serial,
# sender, destination, path, interface, member).
timeline() {
    tail -n +"$2" "$mon" | awk -v t0="$1" '$2 ~ /^[0-9]+\.[0-9]+$/ {
        split($2, a, "."); ms = (a[1] * 1000000 + a[2]) / 1000 - t0 / 1000000
        if (ms >= 0) printf "      %7.1f ms  %-4s %s %s %s %s\n", ms, $1, $4, $5, $7, $8 }' |
        grep -v -e 'PropertiesChanged' -e 'org.freedesktop.DBus.Properties' | head -60 || true
}
one() {
    local what=$1 t0 t1 from
    shift
    rm -f /tmp/93-ran
    sleep 1
    from=$(($(wc -l <"$mon") + 1))
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s%N)
    sleep 0.5
    note "$what: ran after $(( ($(cat /tmp/93-ran) - t0) / 1000000 )) ms, returned after $(( (t1 - t0) / 1000000 )) ms"
    timeline "$t0" "$from"
}
for i in $(seq "$runs"); do
    check "run $i"
    one "systemd-run" as_user root systemd-run --wait -q -p User=alice /bin/sh -c 'date +%s%N >/tmp/93-ran'
    one "xrun" as_user alice xrun -g 0 /bin/sh -c 'date +%s%N >/tmp/93-ran'
done
kill "$monpid"
