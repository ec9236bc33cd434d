#!/usr/bin/env bash
# Boots the SD card image itself on qemu's `raspi3b` machine (a Raspberry Pi 3B: the
# BCM2837's cores, interrupt controller, UART, SD host, USB) from its own kernel,
# initrd and device tree (bcm2837-rpi-3-b.dtb), with the card provisioned with a host
# name and a token. qemu does not run the Pi's GPU firmware (bootcode.bin, start.elf):
# it loads the kernel, initrd and device tree itself, as that firmware would with the
# image's config.txt, and passes the image's own cmdline.txt with the one rewrite the
# firmware makes: `serial0` named as the UART it is (see below).
#
#   board/image/raspi3b-check.sh IMAGE.img.xz|IMAGE.img [SECONDS]
#
# Says how far the board got ("RASPI3B saw"/"RASPI3B missed" lines, each with the
# second of the kernel's clock it was seen at) and, read back from the card after the
# power is cut, what first boot did: linnet-firstboot.txt, the token gone from the FAT,
# the host name and token on the root. Then which of the Pi's devices the kernel could
# not drive under qemu ("RASPI3B qemu lacks" lines). Not in CI: under TCG the boot takes
# a few minutes of both cores, for what the virtual board already checks on `virt`;
# exit 0 when the login prompt was reached and the card was provisioned.
set -euo pipefail
img=${1:?usage: raspi3b-check.sh IMAGE.img.xz [SECONDS]}
limit=${2:-600}
work=$(mktemp -d "${TMPDIR:-/var/tmp}/linnet-raspi3b.XXXXXX")
qemu_pid=
cleanup() { [ -n "$qemu_pid" ] && kill -9 "$qemu_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

case $img in *.xz) xz -dc "$img" > "$work/disk.img" ;; *) cp --sparse=always "$img" "$work/disk.img" ;; esac
# qemu's SD card is a power of two in size; the larger card is also what
# linnet-grow-root takes at first boot.
size=$(stat -c %s "$work/disk.img") card=1
while [ "$card" -lt "$size" ]; do card=$((card * 2)); done
truncate -s "$card" "$work/disk.img"
fat="$work/disk.img@@4M"
for f in cmdline.txt bcm2837-rpi-3-b.dtb; do mcopy -i "$fat" "::/$f" "$work/$f"; done
kernel=$(mdir -b -i "$fat" ::/ | sed -n 's#^::/\(vmlinuz-.*\)#\1#p' | head -n 1)
initrd=$(mdir -b -i "$fat" ::/ | sed -n 's#^::/\(initrd.img-.*\)#\1#p' | head -n 1)
mcopy -i "$fat" "::/$kernel" "$work/vmlinuz"
mcopy -i "$fat" "::/$initrd" "$work/initrd.img"

token="sk-raspi3b-$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')"
printf '%s\n' "$token" > "$work/token"
echo pi3-check > "$work/hostname"
for f in token hostname; do mcopy -o -i "$fat" "$work/$f" "::/$f"; done

# The firmware rewrites `console=serial0` into the UART it is. On a Pi 3 the PL011
# (ttyAMA0) belongs to Bluetooth (the device tree binds it to hci_uart), and serial0 is
# the mini UART, ttyS1: qemu's second serial port. It is put last, making it
# /dev/console, so systemd's progress is on it too (on the card, tty1 is: a screen).
cmdline="$(tr -d '\n' < "$work/cmdline.txt" | sed 's/console=serial0,115200 *//') console=ttyS1,115200"
qemu-system-aarch64 -M raspi3b -kernel "$work/vmlinuz" -initrd "$work/initrd.img" \
  -dtb "$work/bcm2837-rpi-3-b.dtb" -append "$cmdline" \
  -drive file="$work/disk.img",format=raw,if=sd \
  -display none -monitor none -serial file:"$work/pl011.log" -serial file:"$work/console.log" &
qemu_pid=$!
start=$(date +%s)
until grep -q 'login:' "$work/console.log" 2>/dev/null; do
  [ $(( $(date +%s) - start )) -lt "$limit" ] && kill -0 "$qemu_pid" 2>/dev/null || break
  sleep 2
done
wall=$(( $(date +%s) - start ))
kill -9 "$qemu_pid" 2>/dev/null || true
wait "$qemu_pid" 2>/dev/null || true
qemu_pid=

# The kernel's messages on either UART (the PL011 has them until Bluetooth's driver
# takes it), then the console.
c=$work/all.log
cat "$work/pl011.log" "$work/console.log" > "$c" 2>/dev/null || true
saw() {  # saw WHAT PATTERN
  local l
  l=$(grep -a -m1 -E "$2" "$c" || true)
  if [ -n "$l" ]; then
    echo "RASPI3B saw $1 (at $(sed -n 's/^\[ *\([0-9.]*\)\].*/\1 s/p' <<<"$l" | head -n 1))"
  else
    echo "RASPI3B missed $1"
  fi
}
saw "the kernel on a Pi 3B's device tree" 'Machine model: Raspberry Pi 3'
saw "the SD card and its two partitions" 'mmcblk0: p1 p2'
saw "the root mounted, data=journal" 'mmcblk0p2\): mounted filesystem with journalled data mode'
saw "systemd" 'systemd\[1\]: (Hostname set|systemd [0-9]+ running)'
saw "the root grown to the card" 'mmcblk0p2\): resized filesystem'
ok=1
if grep -a -q 'login:' "$c"; then
  echo "RASPI3B saw the login prompt on the serial console: $(grep -a -m1 'login:' "$c" | tr -d '\r') ($wall s after power-on)"
else
  echo "RASPI3B missed the login prompt within $limit s"; ok=0
fi

# The card, read back with the power off.
if mcopy -i "$fat" ::/linnet-firstboot.txt "$work/report" 2>/dev/null; then
  echo "RASPI3B card: linnet-firstboot.txt says: $(tr -d '\r' < "$work/report" | grep -E '^(token|hostname)' | tr '\n' ';')"
else
  echo "RASPI3B card: no linnet-firstboot.txt"; ok=0
fi
if mdir -b -i "$fat" ::/ | grep -q -x '::/token'; then echo "RASPI3B card: the token is still on the FAT"; ok=0; fi
dd if="$work/disk.img" of="$work/root.img" bs=1M skip=260 status=none
host=$(debugfs -R 'cat /etc/hostname' "$work/root.img" 2>/dev/null || true)
got=$(debugfs -R 'cat /etc/linnet/token' "$work/root.img" 2>/dev/null || true)
echo "RASPI3B root: /etc/hostname '$host', /etc/linnet/token $([ "$got" = "$token" ] && echo 'is the card'"'"'s' || echo 'is not the card'"'"'s')"
# What the services said, from the journal on the card.
if debugfs -R 'rdump /var/log/journal '"$work" "$work/root.img" >/dev/null 2>&1; then
  journalctl -D "$work/journal" -o cat --no-pager -u linnet-provision -u linnet 2>/dev/null | tail -n 12 | sed 's/^/RASPI3B journal: /'
fi
[ "$host" = pi3-check ] && [ "$got" = "$token" ] || ok=0

# What qemu's Pi 3B does not have: the devices whose drivers gave up.
grep -a -E 'probe of .* failed|failed to set channelbase|Internal error: Oops' "$c" \
  | sed -E 's/^\[ *[0-9.]*\] //' | sort -u | sed 's/^/RASPI3B qemu lacks: /'
exit $(( ok == 1 ? 0 : 1 ))
