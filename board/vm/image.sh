#!/usr/bin/env bash
# The virtual board's disk: Debian 12 arm64 with Debian's own kernel, systemd as PID 1,
# snd-aloop (in the kernel package) and gpio-sim (built out of tree, gpio-sim.sh).
# Built with mmdebstrap under qemu-user (binfmt), then turned into a compressed qcow2
# in a cache directory keyed on everything that goes into it, so a second run reuses it.
#
#   board/vm/image.sh            prints the cache entry's directory (building it if needed)
#
# The entry holds rootfs.qcow2 (never written to: each boot runs on an overlay),
# vmlinuz and initrd.img (booted directly by qemu), the ssh key the harness logs in with,
# and build-seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${VBOARD_CACHE:-/var/cache/linnet-vboard}
say() { echo "vboard-image: $*" >&2; }

# The pinned kernel: its ABI name is in board/vm/packages, its version here, and
# gpio-sim.sh builds against this exact headers package.
kabi=6.1.0-57-arm64
kver=6.1.192-3
export KABI=$kabi KVER=$kver

key=$( { cat "$here/packages" "$here/image.sh" "$here/customize.sh" "$here/gpio-sim.sh" "$here"/gpio-sim/*; echo "$kabi $kver"; } | sha256sum | cut -c1-16)
entry="$cache/$key"
if [ -f "$entry/done" ]; then
  say "cached: $entry"
  echo "$entry"
  exit 0
fi

start=$(date +%s)
# stdout is the entry's path alone: everything the build says goes to stderr (mke2fs
# says "Creating regular file" on stdout even with -q).
exec 3>&1 1>&2
mkdir -p "$cache"
tmp="$cache/tmp.$key.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT

# qemu-user for the arm64 maintainer scripts: a fresh machine (or a container) may have
# the package without the binfmt_misc mount or the registration.
# (In a chroot the registration may be there with the file system not mounted.)
[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register

# gpio-sim.ko first: a failure there costs seconds, not the rootfs's minutes.
"$here/gpio-sim.sh" "$tmp/gpio-sim"

ssh-keygen -q -t ed25519 -N '' -C linnet-vboard -f "$tmp/id_ed25519"

mapfile -t pkgs < <(sed -e 's/#.*//' "$here/packages" | tr -s ' \t' '\n' | grep -v '^$')
include=$(IFS=,; echo "${pkgs[*]}")

say "mmdebstrap: Debian 12 arm64, kernel $kabi ($kver) (a few minutes under qemu-user)"
# MODULES=list: mkinitramfs with the default MODULES=most spent 20 minutes under
# qemu-user; the initrd needs only the virtio disk and ext4 (the kernel is booted by
# qemu directly, so there is no boot loader either).
mmdebstrap --mode=root --arch=arm64 --variant=apt --include="$include" \
  --essential-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/etc/dpkg/dpkg.cfg.d"
    echo MODULES=list > "$1/etc/initramfs-tools/conf.d/linnet-vboard"
    printf "virtio_pci\nvirtio_blk\next4\n" >> "$1/etc/initramfs-tools/modules"
    printf "path-exclude=/usr/share/man/*\npath-exclude=/usr/share/locale/*\npath-include=/usr/share/locale/locale.alias\n" > "$1/etc/dpkg/dpkg.cfg.d/linnet-vboard"' \
  --customize-hook="$here/customize.sh \"\$1\" $tmp $kabi" \
  bookworm "$tmp/root" \
  "deb http://deb.debian.org/debian bookworm main" \
  "deb http://deb.debian.org/debian bookworm-updates main" \
  "deb http://deb.debian.org/debian-security bookworm-security main" >&2

cp "$tmp/root/boot/vmlinuz-$kabi" "$tmp/vmlinuz"
cp "$tmp/root/boot/initrd.img-$kabi" "$tmp/initrd.img"
# 4 GB sparse: room for the package, logs and an upgrade; qcow2 stores only what is used.
mke2fs -q -t ext4 -L vboard -d "$tmp/root" "$tmp/rootfs.img" 4G
# zstd rather than zlib, the default: the first build spent 96 s in mke2fs and this
# conversion with zlib, which compresses on one core.
qemu-img convert -c -O qcow2 -o compression_type=zstd "$tmp/rootfs.img" "$tmp/rootfs.qcow2"
rm -rf "$tmp/root" "$tmp/rootfs.img" "$tmp/gpio-sim"
echo $(( $(date +%s) - start )) > "$tmp/build-seconds"
echo "$kabi $kver" > "$tmp/kernel"
touch "$tmp/done"
rm -rf "$entry"
mv "$tmp" "$entry"
trap - EXIT
say "built in $(cat "$entry/build-seconds") s: $entry ($(du -sh "$entry/rootfs.qcow2" | cut -f1))"
echo "$entry" >&3
