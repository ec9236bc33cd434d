#!/usr/bin/env bash
# Boots the SD card image's own kernel, initrd and root file system on the virtual
# board's machine (qemu-system-aarch64 -M virt, TCG; the Pi firmware path left out),
# after provisioning it through its boot partition as a user would: a token, an ssh
# key, a host name, a linnet.conf and a wifi.conf dropped on the FAT. Then checks, over
# ssh, that each landed with its mode, and, with the machine off, that the secrets are
# gone from the FAT and linnet-firstboot.txt says why.
#
#   board/image/boot-check.sh IMAGE.img.xz
#
# Prints "IMAGE PASS/FAIL what" lines and "IMAGE figure" lines (boot to ssh, to
# provisioned). Exit 0 when every check passed.
set -euo pipefail
img=${1:?usage: boot-check.sh IMAGE.img.xz}
work=$(mktemp -d "${TMPDIR:-/var/tmp}/linnet-boot-check.XXXXXX")
qemu_pid=
cleanup() { [ -n "$qemu_pid" ] && kill -9 "$qemu_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fails=0
pass() { echo "IMAGE PASS $*"; }
fail() { echo "IMAGE FAIL $*"; fails=$((fails + 1)); }
now() { date +%s.%N; }

xz -dc "$img" > "$work/disk.img"
fat="$work/disk.img@@4M"
kernel=$(mdir -b -i "$fat" ::/ | sed -n 's#^::/\(vmlinuz-.*\)#\1#p' | head -n 1)
initrd=$(mdir -b -i "$fat" ::/ | sed -n 's#^::/\(initrd.img-.*\)#\1#p' | head -n 1)
[ -n "$kernel" ] && [ -n "$initrd" ] || { echo "no kernel or initrd on the boot partition" >&2; mdir -i "$fat" ::/ >&2; exit 1; }
mcopy -i "$fat" "::/$kernel" "$work/vmlinuz"
mcopy -i "$fat" "::/$initrd" "$work/initrd.img"

# What a user drops on the card.
ssh-keygen -q -t ed25519 -N '' -C boot-check -f "$work/key"
token="sk-boot-check-$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')"
passphrase="boot check passphrase $(od -An -tx1 -N4 /dev/urandom | tr -d ' \n')"
printf '%s\r\n' "$token" > "$work/token.txt"
printf 'ssid = BootCheck\npassphrase = %s\ncountry = GB\n' "$passphrase" > "$work/wifi.conf"
echo kiosk-check > "$work/hostname"
cp "$work/key.pub" "$work/authorized_keys"
for f in token.txt wifi.conf hostname authorized_keys; do mcopy -o -i "$fat" "$work/$f" "::/$f"; done

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start=$(now)
qemu-system-aarch64 -M virt -cpu cortex-a72 -smp 2 -m 1024 -accel tcg,thread=multi \
  -kernel "$work/vmlinuz" -initrd "$work/initrd.img" \
  -append "root=LABEL=LINNETROOT rw console=ttyAMA0 net.ifnames=0" \
  -drive file="$work/disk.img",format=raw,if=none,id=disk -device virtio-blk-pci,drive=disk \
  -netdev user,id=net,hostfwd=tcp:127.0.0.1:"$port"-:22 -device virtio-net-pci,netdev=net,romfile= \
  -device virtio-rng-pci -display none -monitor none -serial file:"$work/console.log" &
qemu_pid=$!
g() { ssh -q -i "$work/key" -p "$port" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5 root@127.0.0.1 "$@"; }
deadline=$(( $(date +%s) + 400 ))
until g true 2>/dev/null; do
  if [ "$(date +%s)" -gt "$deadline" ] || ! kill -0 "$qemu_pid" 2>/dev/null; then
    fail "boot: no ssh with the provisioned key within 400 s"; tail -n 40 "$work/console.log"; exit 1
  fi
  sleep 2
done
echo "IMAGE figure boot_to_ssh_s $(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
g 'systemctl is-system-running --wait' > "$work/running" 2>&1 || true
pass "boot: ssh with the key from the card's authorized_keys (system $(cat "$work/running"))"

[ "$(g 'cat /etc/linnet/token; stat -c %a:%U /etc/linnet/token')" = "$token"$'\n'"600:root" ] && pass "token installed 0600 root" || fail "token not installed as expected"
[ "$(g hostname)" = kiosk-check ] && pass "hostname kiosk-check" || fail "hostname is $(g hostname)"
g 'grep -q "^psk=" /etc/NetworkManager/system-connections/linnet-wifi-1.nmconnection && stat -c %a /etc/NetworkManager/system-connections/linnet-wifi-1.nmconnection' | grep -qx 600 && pass "wifi.conf → NetworkManager profile 0600" || fail "no NetworkManager profile"
g 'systemctl show -p Result,ActiveState linnet-provision' | tr '\n' ' ' | grep -q 'Result=success' && pass "linnet-provision.service succeeded" || fail "linnet-provision: $(g 'systemctl status --no-pager linnet-provision' | tail -n 5)"
g 'systemctl is-active linnet' >/dev/null 2>&1 && pass "linnet.service active" || echo "IMAGE note linnet.service: $(g 'systemctl is-active linnet; cat /run/linnet/status.json 2>/dev/null' | tr '\n' ' ')"
# data=journal comes from the superblock's default mount options, which findmnt does
# not list; the kernel's own view of the mount does.
g 'cat /proc/fs/ext4/$(basename $(findmnt -no SOURCE /))/options' | grep -qx 'data=journal' && pass "root mounted data=journal" || fail "root not data=journal: $(g 'findmnt -no OPTIONS /')"
echo "IMAGE figure root_used_mb $(g 'df -m --output=used / | tail -n 1' | tr -d ' ')"
g 'systemctl poweroff' || true
for _ in $(seq 1 120); do kill -0 "$qemu_pid" 2>/dev/null || break; sleep 1; done
kill -9 "$qemu_pid" 2>/dev/null || true
qemu_pid=

# The card, read back as a laptop would.
left=$(mdir -b -i "$fat" ::/ | sed 's#^::/##')
for f in token.txt wifi.conf hostname authorized_keys; do
  grep -qx "$f" <<<"$left" && fail "$f still on the card" || pass "$f gone from the card"
done
mcopy -i "$fat" ::/linnet-firstboot.txt "$work/report" 2>/dev/null && pass "linnet-firstboot.txt on the card" || fail "no linnet-firstboot.txt"
if grep -a -q -e "$token" -e "$passphrase" "$work/disk.img"; then
  # The FAT clusters were zeroed before the files were removed; a raw copy elsewhere
  # (the root's journal, data=journal) is on the root partition, which is not the card
  # a laptop reads.
  dd if="$work/disk.img" bs=1M skip=4 count=256 status=none | grep -a -q -e "$token" -e "$passphrase" \
    && fail "a secret is still readable in the FAT partition's raw bytes" || pass "no secret in the FAT partition's raw bytes"
else
  pass "no secret anywhere in the raw image"
fi
exit $(( fails > 0 ))
