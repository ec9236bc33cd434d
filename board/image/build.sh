#!/usr/bin/env bash
# The SD card image (issue 39): Debian 12 arm64 for Raspberry Pi 3B+, 4 and Zero 2 W,
# from Debian's packages alone, with Linnet's package installed, its service and the
# first-boot provisioning (linnet-provision) enabled.
#
#   board/image/build.sh LINNET_ARM64_DEB OUT.img.xz
#
# Layout (MBR, what the Pi's boot ROM reads):
#   1  FAT32  256 MiB  label RASPIFIRM  /boot/firmware: raspi-firmware's blobs, the
#                                       kernel, initrd and device trees its hooks copy
#                                       there, config.txt, cmdline.txt; where the user
#                                       drops linnet.conf, token, wifi.conf, board
#   2  ext4   1.5 GiB  label LINNETROOT /  (data=journal: see below); grown to the rest
#                                       of the card at first boot (linnet-grow-root)
#
# Built with mmdebstrap under qemu-user (binfmt) as the virtual board's disk is; no
# loop devices: the partitions are made as files (mkfs.vfat + mcopy, mke2fs -d) and
# copied into the disk file at their offsets, so it runs in a container.
#
# Power cuts: the root is ext4 with its journal, mounted data=journal (file contents
# go through the journal too, so a file written and renamed is whole after a cut, not
# zero-length), commit=5; Linnet's own state files are written atomically (write, fsync,
# rename). The FAT partition is written only by linnet-provision (atomic renames and
# syncs) and raspi-firmware's kernel hooks.
#
# Reproducibility: SOURCE_DATE_EPOCH (from the last commit) fixes every timestamp
# mmdebstrap, mke2fs and mtools write; the file systems' UUIDs, volume id and hash seed
# are derived from it. What still differs between two builds: the package versions
# deb.debian.org serves that day (pin them with a snapshot.debian.org mirror to get the
# same bytes), and the ssh host keys, which are not in the image (made at first boot).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
deb=${1:?usage: build.sh LINNET_ARM64_DEB OUT.img.xz}
out=${2:?usage: build.sh LINNET_ARM64_DEB OUT.img.xz}
[ -f "$deb" ] || { echo "build.sh: no package at $deb (make arm64 deb)" >&2; exit 1; }
say() { echo "image: $*" >&2; }

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)}
seed=$(printf 'linnet-image-%s' "$SOURCE_DATE_EPOCH" | sha256sum | cut -c1-32)
root_uuid=$(printf '%s-%s-4%s-8%s-%s' "${seed:0:8}" "${seed:8:4}" "${seed:13:3}" "${seed:17:3}" "${seed:20:12}")
fat_id=${seed:0:8}

start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/var/tmp}/linnet-image.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register

cp "$deb" "$work/linnet.deb"
mapfile -t pkgs < <(sed -e 's/#.*//' "$here/packages" | tr -s ' \t' '\n' | grep -v '^$')
include=$(IFS=,; echo "${pkgs[*]}")

say "mmdebstrap: Debian 12 arm64 (a few minutes under qemu-user)"
mmdebstrap --mode=root --arch=arm64 --variant=apt --include="$include" \
  --components="main non-free-firmware" \
  --essential-hook='mkdir -p "$1/etc/dpkg/dpkg.cfg.d" "$1/boot/firmware" "$1/etc/default" "$1/etc/initramfs-tools/conf.d"
    printf "path-exclude=/usr/share/man/*\npath-exclude=/usr/share/locale/*\npath-include=/usr/share/locale/locale.alias\npath-exclude=/usr/share/doc/*\npath-include=/usr/share/doc/*/copyright\npath-include=/usr/share/doc/linnet/*\n" > "$1/etc/dpkg/dpkg.cfg.d/linnet-image"
    # raspi-firmware writes cmdline.txt from this (its kernel hook).
    printf "ROOTPART=LABEL=LINNETROOT\nCONSOLES=\"serial0,115200 tty1\"\n" > "$1/etc/default/raspi-firmware"
    # The initrd needs the SD card and the root file system, not every driver: a
    # smaller initrd, and mkinitramfs under qemu-user in minutes, not tens. (MODULES=dep
    # looks at the machine it runs on: in a chroot it cannot tell the root device.)
    # The Pi 3 SD host (bcm2835), the Pi 4 one (sdhci-iproc), and virtio for the
    # virtual board that boots this root in CI.
    echo MODULES=list > "$1/etc/initramfs-tools/conf.d/linnet-image"
    printf "mmc_block\nsdhci_iproc\nbcm2835\next4\nvirtio_pci\nvirtio_blk\n" >> "$1/etc/initramfs-tools/modules"' \
  --dpkgopt=force-confold \
  --customize-hook="cp $work/linnet.deb \"\$1/tmp/linnet.deb\" && chroot \"\$1\" apt-get install -y --no-install-recommends /tmp/linnet.deb && rm \"\$1/tmp/linnet.deb\"" \
  --customize-hook="$here/customize.sh \"\$1\"" \
  bookworm "$work/root" \
  "deb http://deb.debian.org/debian bookworm main non-free-firmware" \
  "deb http://deb.debian.org/debian bookworm-updates main non-free-firmware" \
  "deb http://deb.debian.org/debian-security bookworm-security main non-free-firmware" >&2

# Every time stamp at SOURCE_DATE_EPOCH or before: what maintainer scripts made during
# the build carries the build's own time (mke2fs -d and mcopy -m copy them).
find "$work/root" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# The FAT partition from what the hooks put in /boot/firmware.
fat_mib=256
mkfs.vfat -C -F 32 -n RASPIFIRM -i "$fat_id" --invariant "$work/fat.img" $((fat_mib * 1024)) >/dev/null
( cd "$work/root/boot/firmware" && find . -mindepth 1 -maxdepth 1 -print0 | sort -z | xargs -0 -r -I{} mcopy -s -p -m -i "$work/fat.img" {} ::/ )
rm -rf "$work/root/boot/firmware"/*

# The root partition. 1.5 GiB: the system is about 600 MB; linnet-grow-root takes the
# rest of the card at first boot.
root_mib=1536
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mke2fs -q -t ext4 -L LINNETROOT -U "$root_uuid" -E "hash_seed=$root_uuid" -d "$work/root" "$work/root.img" ${root_mib}M
tune2fs -o journal_data "$work/root.img" >/dev/null

# The disk: MBR, the FAT at 4 MiB (the SD card's erase blocks), the root after it.
disk=$work/disk.img
total_mib=$((4 + fat_mib + root_mib))
truncate -s ${total_mib}M "$disk"
sfdisk --quiet "$disk" <<EOF
label: dos
label-id: 0x${fat_id}
start=4MiB, size=${fat_mib}MiB, type=c, bootable
start=$((4 + fat_mib))MiB, type=83
EOF
dd if="$work/fat.img" of="$disk" bs=1M seek=4 conv=notrunc,sparse status=none
dd if="$work/root.img" of="$disk" bs=1M seek=$((4 + fat_mib)) conv=notrunc,sparse status=none

mkdir -p "$(dirname "$out")"
xz -T0 -6 -c "$disk" > "$out.tmp"
mv -f "$out.tmp" "$out"
say "built in $(( $(date +%s) - start )) s: $out ($(stat -c %s "$out") bytes xz, $((total_mib)) MiB raw)"
BENCH_LINE="BENCH image_xz_bytes $(stat -c %s "$out") bytes"
echo "$BENCH_LINE"
