#!/usr/bin/env bash
# The SD card image (issue 39): Debian 12 arm64 for Raspberry Pi 3B+, 4 and Zero 2 W,
# from Debian's packages alone, with Linnet's package installed, its service and the
# first-boot provisioning (linnet-provision) enabled.
#
#   board/image/build.sh LINNET_ARM64_DEB OUT.img.xz   (OUT.img: the raw disk, for CI)
#
# Layout (MBR, what the Pi's boot ROM reads):
#   1  FAT32  256 MiB  label RASPIFIRM  /boot/firmware: raspi-firmware's blobs, the
#                                       kernel, initrd and device trees its hooks copy
#                                       there, config.txt, cmdline.txt; where the user
#                                       drops linnet.conf, token, wifi.conf, board
#   2  ext4   1.5 GiB  label LINNETROOT /  (data=journal: see below); grown to the rest
#                                       of the card at first boot (linnet-grow-root)
#
# The Debian root is made by base.sh (mmdebstrap under qemu-user, cached); the package
# is installed on a copy of it with dpkg, then customize.sh. No
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
base=$("$here/base.sh")
say "the package on the cached root ($base)"
mkdir "$work/root"
tar --numeric-owner --xattrs --acls -C "$work/root" -xf "$base/root.tar"
cp "$work/linnet.deb" "$work/root/tmp/linnet.deb"
# dpkg, not apt: the root has every dependency already (packages), and no network is
# needed. The maintainer scripts see no systemd and no udev (a chroot), as in mmdebstrap.
chroot "$work/root" dpkg --force-confold -i /tmp/linnet.deb >&2
rm "$work/root/tmp/linnet.deb"
# dpkg logs the install with the wall clock: every line of its log is set to
# SOURCE_DATE_EPOCH (the base's lines were made at its own build time).
log_at=$(date -u -d "@$SOURCE_DATE_EPOCH" '+%Y-%m-%d %H:%M:%S')
sed -i "s/^[0-9-]* [0-9:]* /$log_at /" "$work/root/var/log/dpkg.log"
"$here/customize.sh" "$work/root"
cp "$base/packages.lock" "$work/packages.lock"
chroot "$work/root" dpkg-query -W -f '${Package} ${Version}\n' linnet >> "$work/packages.lock"

# Every time stamp at SOURCE_DATE_EPOCH or before: what maintainer scripts made during
# the build carries the build's own time (mke2fs -d and mcopy -m copy them).
find "$work/root" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# The FAT partition from what the hooks put in /boot/firmware.
fat_mib=256
mkfs.vfat -C -F 32 -n RASPIFIRM -i "$fat_id" --invariant "$work/fat.img" $((fat_mib * 1024)) >/dev/null
( cd "$work/root/boot/firmware" && find . -mindepth 1 -maxdepth 1 -print0 | sort -z | xargs -0 -r -I{} mcopy -s -p -m -i "$work/fat.img" {} ::/ )
rm -rf "$work/root/boot/firmware"/*
touch -d "@$SOURCE_DATE_EPOCH" "$work/root/boot/firmware"

# The root partition. 1.5 GiB: the system is about 600 MB; linnet-grow-root takes the
# rest of the card at first boot.
root_mib=1536
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mke2fs -q -t ext4 -L LINNETROOT -U "$root_uuid" -E "hash_seed=$root_uuid" -d "$work/root" "$work/root.img" ${root_mib}M >&2
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH tune2fs -o journal_data "$work/root.img" >/dev/null
# mke2fs -d copies each file's access and change times, which are this build's (the
# extraction, dpkg): set both to SOURCE_DATE_EPOCH in the file system itself (a change
# time cannot be set on the files before).
( cd "$work/root" && find . -mindepth 1 -printf '%P\n' ) \
  | awk -v t="@$SOURCE_DATE_EPOCH" 'BEGIN { print "sif / atime " t; print "sif / ctime " t }
      { gsub(/"/, "\\\""); printf "sif \"/%s\" atime %s\nsif \"/%s\" ctime %s\n", $0, t, $0, t }' > "$work/times.debugfs"
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH debugfs -w -f "$work/times.debugfs" "$work/root.img" > /dev/null 2> "$work/times.err" \
  || { cat "$work/times.err" >&2; exit 1; }

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
# The raw disk's hash is what two builds are compared by (xz's output is a function of
# its input, so the same raw bytes give the same .xz).
sha=$(sha256sum "$disk" | cut -c1-64)
case $out in
  *.img) cp --sparse=always "$disk" "$out.tmp" ;;   # the virtual board's CI boot: no xz
  *) xz -T0 -6 -c "$disk" > "$out.tmp" ;;
esac
mv -f "$out.tmp" "$out"
{ echo "# $(basename "$out"): raw disk sha256 $sha"; cat "$work/packages.lock"; } > "${out%.xz}.manifest"
say "built in $(( $(date +%s) - start )) s: $out ($(stat -c %s "$out") bytes, $((total_mib)) MiB raw, raw sha256 ${sha:0:16})"
echo "BENCH image_bytes $(stat -c %s "$out") bytes ($(basename "$out"))"
echo "BENCH image_build_seconds $(( $(date +%s) - start )) s (the cached Debian root: $(cat "$base/build-seconds") s when it was built)"
