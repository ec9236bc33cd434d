#!/usr/bin/env bash
# mmdebstrap's customize hook (board/vm/image.sh): makes the rootfs a bootable board
# the harness can drive. $1 the rootfs, $2 the build directory (ssh key, gpio-sim.ko),
# $3 the kernel's ABI name.
set -euo pipefail
root=$1 build=$2 kabi=$3

echo linnet-vboard > "$root/etc/hostname"
printf '127.0.1.1\tlinnet-vboard\n' >> "$root/etc/hosts"
printf '/dev/vda\t/\text4\terrors=remount-ro\t0\t1\n' > "$root/etc/fstab"

# The harness logs in as root with its own key; nothing else can log in.
install -d -m 700 "$root/root/.ssh"
install -m 600 "$build/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
printf 'PasswordAuthentication no\nUseDNS no\n' > "$root/etc/ssh/sshd_config.d/vboard.conf"

# qemu's user network: DHCP on the one interface (net.ifnames=0 on the command line).
cat > "$root/etc/systemd/network/eth0.network" <<'NET'
[Match]
Name=eth0
[Network]
DHCP=ipv4
NET
chroot "$root" systemctl enable systemd-networkd >/dev/null 2>&1
# Nothing that wakes up on its own and competes with the tests for the emulated CPU.
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
  chroot "$root" systemctl disable "$u" >/dev/null 2>&1 || true
  chroot "$root" systemctl mask "$u" >/dev/null 2>&1 || true
done
# A marker on the serial console once multi-user is reached (the harness polls ssh;
# the marker says how far a boot that never answered got).
cat > "$root/etc/systemd/system/vboard-ready.service" <<'UNIT'
[Unit]
Description=virtual board ready marker
After=multi-user.target ssh.service
[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo VBOARD-READY > /dev/ttyAMA0'
[Install]
WantedBy=multi-user.target
UNIT
chroot "$root" systemctl enable vboard-ready.service >/dev/null 2>&1
# The journal on disk: after a power cut it says what the last boot did.
mkdir -p "$root/var/log/journal"

# gpio-sim, out of tree (board/vm/gpio-sim.sh), loaded at boot with configfs.
install -D -m 644 "$build/gpio-sim/gpio-sim.ko" "$root/lib/modules/$kabi/extra/gpio-sim.ko"
chroot "$root" depmod -a "$kabi"
printf 'snd-aloop\ngpio-sim\n' > "$root/etc/modules-load.d/vboard.conf"
