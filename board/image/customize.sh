#!/usr/bin/env bash
# mmdebstrap's customize hook for the SD card image (board/image/build.sh): $1 the root.
set -euo pipefail
root=$1

echo linnet > "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tlinnet\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"
# The root's journal carries file data too (data=journal, set in the superblock by
# build.sh: it cannot be changed by a remount); commit every 5 s. The FAT is root's
# alone (the token sits there until linnet-provision moves it), and written through.
cat > "$root/etc/fstab" <<'FSTAB'
LABEL=LINNETROOT  /               ext4  defaults,commit=5,errors=remount-ro                 0 1
LABEL=RASPIFIRM   /boot/firmware  vfat  rw,flush,umask=0077,fmask=0177,dmask=0077,nofail   0 2
FSTAB

# First boot: ssh host keys made on the board (never two boards with the same keys).
rm -f "$root"/etc/ssh/ssh_host_*
cat > "$root/etc/systemd/system/linnet-ssh-keys.service" <<'UNIT'
[Unit]
Description=Linnet image: make this board's ssh host keys
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
Before=ssh.service
[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A
ExecStart=/bin/sync
[Install]
WantedBy=multi-user.target
UNIT
printf 'PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n' > "$root/etc/ssh/sshd_config.d/linnet-image.conf"

# First boot: the root partition takes the rest of the card.
install -m 0755 /dev/stdin "$root/usr/lib/linnet/linnet-grow-root" <<'GROW'
#!/bin/sh
# Grows the root partition and its file system to the end of the card, once.
set -eu
dev=$(findmnt -no SOURCE /)
disk=/dev/$(lsblk -no PKNAME "$dev")
part=$(cat "/sys/class/block/$(basename "$dev")/partition")
echo ", +" | sfdisk --no-reread --no-tell-kernel -N "$part" "$disk" >/dev/null 2>&1 || true
partx -u "$disk" 2>/dev/null || true
resize2fs "$dev" >/dev/null 2>&1 || true
mkdir -p /var/lib/linnet-image
touch /var/lib/linnet-image/root-grown
sync
GROW
cat > "$root/etc/systemd/system/linnet-grow-root.service" <<'UNIT'
[Unit]
Description=Linnet image: grow the root file system to the card
ConditionPathExists=!/var/lib/linnet-image/root-grown
After=local-fs.target
[Service]
Type=oneshot
ExecStart=/usr/lib/linnet/linnet-grow-root
[Install]
WantedBy=multi-user.target
UNIT

for u in linnet.service linnet-provision.service linnet-ssh-keys.service linnet-grow-root.service NetworkManager.service ssh.service systemd-timesyncd.service; do
  chroot "$root" systemctl enable "$u" >/dev/null 2>&1
done
# Nothing that wakes up on its own and writes to the card.
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service; do
  chroot "$root" systemctl mask "$u" >/dev/null 2>&1 || true
done
# The usb profile's sound by default: on Debian's kernel it is the one that makes sound
# (board/image/README.md); a `board` file on the card replaces it.
install -m 0644 "$root/usr/share/linnet/board/usb/asound.conf" "$root/etc/asound.conf"
# A token file and a config for the service to start with; linnet-provision replaces
# them. Without a token the service waits and says so (status file, journal).
mkdir -p "$root/var/log/journal"
