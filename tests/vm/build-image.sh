#!/bin/bash
# Build the xlurm test VM image: a small Debian 12 with real systemd.
#
#   build-image.sh OUTDIR
#
# Writes OUTDIR/root.img (raw ext4, 1 GiB sparse), OUTDIR/vmlinuz, OUTDIR/initrd.img.
# This file is the image recipe: `tests/vm/run` hashes it (and the env vars listed in
# RECIPE_ENV below) to name the cache directory, so any edit here rebuilds the image.
# Runs as root on the host (mmdebstrap --mode=root).
set -euo pipefail

out=${1:?usage: build-image.sh OUTDIR}
# Recipe inputs that come from the environment (run folds them into the cache hash).
# RECIPE_ENV: XLURM_VM_MIRROR XLURM_VM_SECURITY_MIRROR
mirror=${XLURM_VM_MIRROR:-http://deb.debian.org/debian}
security=${XLURM_VM_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

packages=systemd,systemd-sysv,dbus,polkitd,pkexec,udev,kmod,procps,util-linux,linux-image-amd64,man-db,bash-completion,dbus-user-session
# Real Slurm (22.05), to run the same batch scripts under sbatch and xbatch (VM
# 17): disabled at boot below, started only by that scenario.
packages+=,slurmctld,slurmd,slurm-client,munge,iproute2

rootfs="$out/rootfs"
mkdir -p "$out"
rm -rf "$rootfs"

# The guest side of the rig. The unit only runs when the kernel command line carries
# `xlurm.test`; it mounts the 9p share and hands over to the runner staged there
# (tests/vm/guest-runner.sh), so changing the runner never rebuilds the image.
read -r -d '' boot_script <<'GUEST' || true
#!/bin/bash
# xlurm VM test bootstrap (baked into the image by tests/vm/build-image.sh).
set -u
share=/mnt/xlurm
mkdir -p "$share"
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 xlurm "$share"; then
    echo "xlurm-vm: cannot mount the 9p share" >&2
    systemctl poweroff --no-block
    exit 1
fi
rc=0
bash "$share/rig/guest-runner.sh" "$share" || rc=$?
echo "xlurm-vm: runner finished rc=$rc" >&2
sync
systemctl poweroff --no-block
exit "$rc"
GUEST

read -r -d '' unit <<'GUEST' || true
[Unit]
Description=xlurm VM test runner
ConditionKernelCommandLine=xlurm.test
After=multi-user.target dbus.service systemd-journal-flush.service
Wants=dbus.service
# Power off whatever happens, so the host never waits for its timeout.
SuccessAction=poweroff
FailureAction=poweroff

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/xlurm-vm-test
TimeoutStartSec=infinity
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
GUEST

t0=$(date +%s)
# mmdebstrap runs in the background so a TERM from tests/vm/run reaches this trap at once;
# mmdebstrap cleans up (unmounts /proc, /dev, ... in the chroot) on TERM.
mm=""
trap 'echo "build-image: interrupted" >&2; [ -n "$mm" ] && kill -TERM "$mm" 2>/dev/null && wait "$mm"; exit 143' TERM INT HUP
mmdebstrap --mode=root --variant=minbase --format=directory \
    --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --essential-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"' \
    --essential-hook='echo MODULES=list > "$1/etc/initramfs-tools/conf.d/xlurm-vm.conf"' \
    --essential-hook='echo COMPRESS=zstd >> "$1/etc/initramfs-tools/conf.d/xlurm-vm.conf"' \
    --essential-hook='printf "%s\n" virtio_pci virtio_blk ext4 crc32c_generic > "$1/usr/share/initramfs-tools/modules.d/xlurm-vm"' \
    bookworm "$rootfs" \
    "deb $mirror bookworm main" \
    "deb $mirror bookworm-updates main" \
    "deb $security bookworm-security main" &
mm=$!
wait "$mm"
mm=""
echo "build-image: mmdebstrap took $(( $(date +%s) - t0 ))s" >&2

r=$rootfs
# Identity: a fixed machine-id, written after mmdebstrap (which empties it; an empty one
# triggers first-boot work on every boot).
echo 5f1a0c3e9d2b4a6f8e7c1b0a9d8e7f60 > "$r/etc/machine-id"
echo xlurm-vm > "$r/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 xlurm-vm\n' > "$r/etc/hosts"
echo 'LABEL=root / ext4 rw,noatime 0 1' > "$r/etc/fstab"

# Users: two ordinary ones and an admin in xlurm-admin.
chroot "$r" groupadd -g 1100 xlurm-admin
chroot "$r" useradd -m -u 1001 -s /bin/bash alice
chroot "$r" useradd -m -u 1002 -s /bin/bash bob
chroot "$r" useradd -m -u 1003 -s /bin/bash -G xlurm-admin admin
chroot "$r" passwd -d root >/dev/null

# Persistent journal.
mkdir -p "$r/var/log/journal" "$r/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=persistent\n' > "$r/etc/systemd/journald.conf.d/xlurm-vm.conf"
chroot "$r" systemd-tmpfiles --create --prefix /var/log/journal >/dev/null 2>&1 || true

# Boot speed: nothing periodic, no login prompts, no waiting for a network.
for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
         fstrim.timer man-db.timer systemd-tmpfiles-clean.timer \
         getty@tty1.service serial-getty@ttyS0.service getty.target \
         systemd-networkd-wait-online.service systemd-timesyncd.service \
         e2scrub_reap.service; do
    ln -sf /dev/null "$r/etc/systemd/system/$u"
done

# Slurm's daemons cost every scenario CPU under TCG: VM 17 starts them.
for u in slurmctld.service slurmd.service munge.service; do
    find "$r/etc/systemd/system" -name "$u" -type l -delete
done

# The test runner unit.
install -m 0755 /dev/stdin "$r/usr/local/sbin/xlurm-vm-test" <<<"$boot_script"
printf '%s\n' "$unit" > "$r/etc/systemd/system/xlurm-vm-test.service"
mkdir -p "$r/etc/systemd/system/multi-user.target.wants"
ln -sf ../xlurm-vm-test.service "$r/etc/systemd/system/multi-user.target.wants/xlurm-vm-test.service"

# Prune kernel modules a virtio VM never loads (keeps fs, lib, crypto, 9p, virtio).
for kdir in "$r"/lib/modules/*/; do
    kver=$(basename "$kdir")
    keep=(kernel/fs kernel/lib kernel/crypto kernel/net/9p kernel/drivers/virtio
          kernel/drivers/block/virtio_blk.ko kernel/drivers/net/virtio_net.ko
          kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko
          kernel/drivers/char/hw_random)
    tmp="$kdir/.keep"
    mkdir -p "$tmp"
    for k in "${keep[@]}"; do
        for f in "$kdir$k" "$kdir$k".*; do
            [ -e "$f" ] || continue
            mkdir -p "$tmp/$(dirname "$k")"
            mv "$f" "$tmp/$(dirname "$k")/"
        done
    done
    rm -rf "$kdir/kernel"
    mv "$tmp/kernel" "$kdir/kernel"
    rmdir "$tmp" 2>/dev/null || rm -rf "$tmp"
    chroot "$r" depmod "$kver"
done

# Kernel and initrd go next to the image.
cp "$(ls "$r"/boot/vmlinuz-* | sort -V | tail -1)" "$out/vmlinuz"
cp "$(ls "$r"/boot/initrd.img-* | sort -V | tail -1)" "$out/initrd.img"
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* 2>/dev/null || true

mkfs.ext4 -q -F -L root -E root_owner=0:0 -d "$r" "$out/root.img" 1G
rm -rf "$r"
