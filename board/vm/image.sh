#!/usr/bin/env bash
# What the virtual board adds to the SD card image (board/image) to drive it as a
# test bench: gpio-sim.ko (gpio-sim.sh: Debian's kernel has it off) and the ssh key
# the harness logs in with (provisioned through the card's authorized_keys, as a user's
# would be). Kept in a cache directory keyed on everything that goes into them.
#
#   board/vm/image.sh            prints the cache entry's directory (building it if needed)
#
# The board's disk itself is the product image (board/image/build.sh), made for each
# run from the package under test on the image's cached Debian root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${VBOARD_CACHE:-/var/cache/linnet-vboard}
say() { echo "vboard-image: $*" >&2; }

# The pinned kernel: its ABI name is in board/image/packages, its version here, and
# gpio-sim.sh builds against this exact headers package.
kabi=6.1.0-57-arm64
kver=6.1.192-3
export KABI=$kabi KVER=$kver
grep -qx "linux-image-$kabi" "$here/../image/packages" || { say "board/image/packages does not pin linux-image-$kabi"; exit 1; }

key=$( { cat "$here/image.sh" "$here/gpio-sim.sh" "$here"/gpio-sim/*; echo "$kabi $kver"; } | sha256sum | cut -c1-16)
entry="$cache/$key"
if [ -f "$entry/done" ]; then
  say "cached: $entry"
  echo "$entry"
  exit 0
fi

start=$(date +%s)
exec 3>&1 1>&2
mkdir -p "$cache"
tmp="$cache/tmp.$key.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT

# qemu-user for Kbuild's arm64 host tools.
[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register

"$here/gpio-sim.sh" "$tmp/gpio-sim"
ssh-keygen -q -t ed25519 -N '' -C linnet-vboard -f "$tmp/id_ed25519"
echo "$kabi" > "$tmp/kabi"
echo $(( $(date +%s) - start )) > "$tmp/build-seconds"
touch "$tmp/done"
rm -rf "$entry"
mv "$tmp" "$entry"
trap - EXIT
say "built in $(cat "$entry/build-seconds") s: $entry"
echo "$entry" >&3
