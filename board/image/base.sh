#!/usr/bin/env bash
# The SD card image's Debian 12 arm64 root without Linnet's package (board/image/build.sh
# installs that): mmdebstrap under qemu-user, the longest part of the image's build (about
# 5 minutes here), kept as a tar in a cache directory keyed on this file and `packages`,
# so that an image for a new build of the package takes about two minutes.
#
#   board/image/base.sh     prints the cache entry's directory (building it if needed)
#
# The entry holds root.tar (numeric owners, extended attributes) and build-seconds.
# LINNET_IMAGE_CACHE moves the cache (default /var/cache/linnet-image).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${LINNET_IMAGE_CACHE:-/var/cache/linnet-image}
say() { echo "image-base: $*" >&2; }

key=$(cat "$here/base.sh" "$here/packages" | sha256sum | cut -c1-16)
entry=$cache/$key
if [ -f "$entry/done" ]; then
  say "cached: $entry"
  echo "$entry"
  exit 0
fi
start=$(date +%s)
exec 3>&1 1>&2
mkdir -p "$cache"
tmp=$cache/tmp.$key.$$
rm -rf "$tmp"
mkdir -p "$tmp"
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT

[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register

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
  bookworm "$tmp/root" \
  "deb http://deb.debian.org/debian bookworm main non-free-firmware" \
  "deb http://deb.debian.org/debian bookworm-updates main non-free-firmware" \
  "deb http://deb.debian.org/debian-security bookworm-security main non-free-firmware" >&2 \
  || { say "mmdebstrap failed (is deb.debian.org reachable? apt's proxy?)"; exit 1; }
# What the packages were, for the image's manifest and for telling two builds apart.
chroot "$tmp/root" dpkg-query -W -f '${Package} ${Version} ${Architecture}\n' > "$tmp/packages.lock"
tar --numeric-owner --xattrs --acls -C "$tmp/root" -cf "$tmp/root.tar" .
rm -rf "$tmp/root"
echo $(( $(date +%s) - start )) > "$tmp/build-seconds"
touch "$tmp/done"
rm -rf "$entry"
mv "$tmp" "$entry"
trap - EXIT
say "built in $(cat "$entry/build-seconds") s: $entry ($(du -sh "$entry/root.tar" | cut -f1))"
echo "$entry" >&3
