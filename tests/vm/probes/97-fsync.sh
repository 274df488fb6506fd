#!/bin/bash
# Probe, not a CI scenario (issue 21): what one fdatasync of a job record costs
# on the guest's state disk, next to xrun's submit-to-running time. Run it with:
#   XLURM_VM_SCENARIO_DIR=tests/vm/probes tests/vm/run 97-fsync
# timeout: 300
set -euo pipefail
. "$XLURM_VM_LIB"
systemctl start xlurmd
mkdir -p /var/lib/xlurm
for i in 1 2 3; do
    t0=$(date +%s%N)
    dd if=/dev/zero of=/var/lib/xlurm/97-probe bs=2k count=100 oflag=dsync status=none
    t1=$(date +%s%N)
    note "100 writes of 2 KiB, each synced: $(( (t1 - t0) / 100000 )) us each"
    t0=$(date +%s%N)
    dd if=/dev/zero of=/var/lib/xlurm/97-probe bs=2k count=100 status=none
    t1=$(date +%s%N)
    note "100 writes of 2 KiB, not synced: $(( (t1 - t0) / 100000 )) us each"
done
rm -f /var/lib/xlurm/97-probe
