#!/usr/bin/env bash
# Builds gpio-sim.ko for the virtual board's kernel (KABI, KVER from image.sh) into $1.
# Debian's arm64 kernels are built with CONFIG_GPIO_SIM off, and its dependency
# CONFIG_IRQ_SIM off too, so both sources come from linux-source-6.1 of the same
# version (pinned: KVER) and are linked into one module, cross-compiled here with
# Debian's aarch64-linux-gnu-gcc-12 (the compiler the kernel was built with) against
# Debian's headers for that kernel. Kbuild's host tools in linux-kbuild-6.1 (fixdep,
# modpost) are arm64 binaries: they run under qemu-user (binfmt).
#
# One change to the sources: irq_sim's work handler calls
# handle_simple_irq(irq_to_desc(irq)), and irq_to_desc is not exported to modules.
# generic_handle_irq(irq) is exported and does the same for this domain (it looks the
# descriptor up and calls its flow handler, which irq_sim sets to handle_simple_irq).
# gpio-sim's irq_get_trigger_type() is an inline over irq_get_irq_data(), exported.
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
: "${KABI:?}" "${KVER:?}"
dl=${VBOARD_CACHE:-/var/cache/linnet-vboard}/dl
mkdir -p "$dl" "$out"
say() { echo "vboard-gpio-sim: $*" >&2; }

debs=(linux-source-6.1="$KVER" linux-headers-"${KABI%-arm64}"-common="$KVER"
      linux-headers-"$KABI":arm64="$KVER" linux-kbuild-6.1:arm64="$KVER")
have=1
for f in linux-source-6.1_"$KVER"_all.deb linux-headers-"${KABI%-arm64}"-common_"$KVER"_all.deb \
         linux-headers-"$KABI"_"$KVER"_arm64.deb linux-kbuild-6.1_"$KVER"_arm64.deb; do
  [ -f "$dl/$f" ] || have=0
done
if [ "$have" = 0 ]; then
  say "downloading linux-source-6.1 and the headers, $KVER"
  # apt's sandbox user cannot write into root's cache directory.
  (cd "$dl" && apt-get -q -o APT::Sandbox::User=root download "${debs[@]}" >&2)
fi

work=$out/src
rm -rf "$work"; mkdir -p "$work/tree"
for f in "$dl"/linux-headers-"${KABI%-arm64}"-common_"$KVER"_all.deb "$dl"/linux-headers-"$KABI"_"$KVER"_arm64.deb \
         "$dl"/linux-kbuild-6.1_"$KVER"_arm64.deb; do
  dpkg -x "$f" "$work/tree"
done
hdr=$work/tree/usr/src/linux-headers-$KABI
# The arm64 headers' Makefile includes the common tree by its absolute path.
sed -i "s|/usr/src/|$work/tree/usr/src/|" "$hdr/Makefile"

dpkg-deb --fsys-tarfile "$dl/linux-source-6.1_${KVER}_all.deb" | tar -x -O ./usr/src/linux-source-6.1.tar.xz \
  | tar -xJ -C "$work" linux-source-6.1/drivers/gpio/gpio-sim.c linux-source-6.1/drivers/gpio/gpiolib.h \
      linux-source-6.1/kernel/irq/irq_sim.c
mod=$work/mod
mkdir -p "$mod"
cp "$here/gpio-sim/Kbuild" "$mod/"
cp "$work/linux-source-6.1/drivers/gpio/gpio-sim.c" "$mod/gpio-sim-main.c"
cp "$work/linux-source-6.1/drivers/gpio/gpiolib.h" "$mod/"
cp "$work/linux-source-6.1/kernel/irq/irq_sim.c" "$mod/"
grep -q 'handle_simple_irq(irq_to_desc(irqnum));' "$mod/irq_sim.c" || { say "irq_sim.c changed: check the irq_to_desc work-around"; exit 1; }
sed -i 's/handle_simple_irq(irq_to_desc(irqnum));/generic_handle_irq(irqnum);/' "$mod/irq_sim.c"

make -s -C "$hdr" M="$mod" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- CC=aarch64-linux-gnu-gcc-12 modules >&2
cp "$mod/gpio-sim.ko" "$out/"
modinfo -F vermagic "$out/gpio-sim.ko" | grep -q "^${KABI} " || { say "vermagic: $(modinfo -F vermagic "$out/gpio-sim.ko")"; exit 1; }
say "built $out/gpio-sim.ko ($(modinfo -F vermagic "$out/gpio-sim.ko"))"
