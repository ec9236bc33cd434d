#!/usr/bin/env bash
# Builds linnet_<version>_<arch>.deb from a release binary with dpkg-deb (no debhelper).
#
# usage: scripts/build-deb.sh BINARY [OUTDIR]
#   VERSION overrides the version (default: scripts/version.sh, LinnetVersion in Sources/Signaling).
#   The architecture comes from the binary's ELF header (aarch64 → arm64, x86-64 → amd64).
#
# Contents: /usr/bin/linnet (stripped), /lib/systemd/system/linnet.service,
# linnet-provision.service and /usr/lib/linnet/linnet-provision (disabled: the image's
# first-boot provisioning from the boot partition),
# /etc/linnet/linnet.conf (a conffile), /usr/share/linnet/board/<profile>/ (the board
# profiles), /usr/share/linnet/wake/ (the wake-word models, scripts/fetch-wake-models.sh),
# /usr/share/doc/linnet/ (README, copyright in DEP-5 format naming the
# statically linked libraries: scripts/deb/copyright, and the changelog). Maintainer
# scripts create the `linnet` system user (in audio, gpio and spi) and remove it on
# purge, and the gpio and spi groups where they are missing — recorded in
# /var/lib/linnet/created-groups, so that purge removes those, and only those, when no
# one else is in them. Depends is computed from the binary's NEEDED entries and the
# newest glibc symbol version it uses.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:?usage: build-deb.sh BINARY [OUTDIR]}
outdir=${2:-$(dirname "$bin")}
[ -f "$bin" ] || { echo "no binary at $bin" >&2; exit 1; }

version=${VERSION:-$("$top/scripts/version.sh")}

machine=$(readelf -h "$bin" | sed -n 's/^ *Machine: *//p')
case "$machine" in
  AArch64) arch=arm64; strip=aarch64-linux-gnu-strip ;;
  *X86-64*) arch=amd64; strip=strip ;;
  *) echo "unsupported machine '$machine'" >&2; exit 1 ;;
esac

# Depends from NEEDED: the release binary links everything but libc, libm and ALSA
# statically (scripts/check-needed.sh enforces that).
# GLIBC_ABI_DT_RELR (packed relocations, scripts/embedded-build.sh) came with glibc 2.36.
versions=$(readelf -V "$bin")
glibc=$( { grep -o 'GLIBC_[0-9][0-9.]*' <<<"$versions" | sed 's/GLIBC_//'
           if grep -q GLIBC_ABI_DT_RELR <<<"$versions"; then echo 2.36; fi; } | sort -uV | tail -n 1)
depends=()
for lib in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
  case "$lib" in
    libc.so.6|libm.so.6|ld-linux-*) dep="libc6 (>= ${glibc:-2.36})" ;;
    libasound.so.2) dep="libasound2 (>= 1.0.27)" ;;
    *) echo "no package known for NEEDED $lib (see scripts/check-needed.sh)" >&2; exit 1 ;;
  esac
  [[ " ${depends[*]-} " == *" $dep"* ]] || depends+=("$dep")
done
# The maintainer scripts create the user and groups with adduser/addgroup.
depends+=("adduser")
depends_field=$(IFS=,; echo "${depends[*]}" | sed 's/,/, /g')

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/linnet" \
  "$root/usr/share/doc/linnet" "$root/usr/share/linnet/board"
"$strip" -o "$root/usr/bin/linnet" "$bin"
chmod 0755 "$root/usr/bin/linnet"
install -m 0644 "$top/systemd/linnet.service" "$root/lib/systemd/system/linnet.service"
# The SD card image's first-boot step (board/image), installed disabled.
install -m 0644 "$top/systemd/linnet-provision.service" "$root/lib/systemd/system/linnet-provision.service"
install -d "$root/usr/lib/linnet"
install -m 0755 "$top/board/image/linnet-provision" "$root/usr/lib/linnet/linnet-provision"
install -d "$root/lib/udev/rules.d"
install -m 0644 "$top/systemd/60-linnet.rules" "$root/lib/udev/rules.d/60-linnet.rules"
install -m 0644 "$top/board/usb/linnet.conf" "$root/etc/linnet/linnet.conf"
install -m 0644 "$top/README.md" "$root/usr/share/doc/linnet/README.md"
install -m 0644 "$top/scripts/deb/copyright" "$root/usr/share/doc/linnet/copyright"
# Policy §12.7: a native package (no Debian revision) ships changelog.gz, any other
# changelog.Debian.gz; gzip -n and a fixed date keep the package reproducible.
changelog=changelog.gz
[[ "$version" == *-* ]] && changelog=changelog.Debian.gz
when=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)}
{
  echo "linnet ($version) unstable; urgency=medium"
  echo
  echo "  * Linnet $version: see /usr/share/doc/linnet/README.md for what it does and"
  echo "    how to set it up on a board."
  echo
  echo " -- Linnet developers <linnet@localhost>  $(LC_ALL=C date -u -R -d "@$when")"
} | gzip -9n > "$root/usr/share/doc/linnet/$changelog"
chmod 0644 "$root/usr/share/doc/linnet/$changelog"
# A profile is a folder with a linnet.conf (as BoardConfigTests counts them): board/vm
# is the virtual board's test harness, not something to install.
for profile in "$top"/board/*/; do
  [ -f "$profile/linnet.conf" ] || continue
  name=$(basename "$profile")
  install -d "$root/usr/share/linnet/board/$name"
  install -m 0644 "$profile"/* "$root/usr/share/linnet/board/$name/"
done
install -m 0644 "$top/board/README.md" "$root/usr/share/linnet/board/README.md"
# The wake-word models (wake-word = NAME), from pymicro-wakeword's source archive.
"$top/scripts/fetch-wake-models.sh" "$top/build/third_party/wake"
install -d "$root/usr/share/linnet/wake"
install -m 0644 "$top"/build/third_party/wake/*.tflite "$top"/build/third_party/wake/*.json \
  "$top/build/third_party/wake/LICENSE" "$root/usr/share/linnet/wake/"

echo /etc/linnet/linnet.conf > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/control" <<CONTROL
Package: linnet
Version: $version
Architecture: $arch
Maintainer: Linnet developers <linnet@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends_field
Recommends: alsa-utils
Section: sound
Priority: optional
Description: voice agent for Linux single-board computers
 Captures a USB or I2S microphone with ALSA, encodes Opus and talks to a cloud
 voice provider over its own WebRTC stack; the answer plays on the speaker. A
 GPIO push-to-talk button and status LEDs are supported. Runs as the systemd
 service linnet.service under its own user.
CONTROL

cat > "$root/DEBIAN/preinst" <<'SCRIPT'
#!/bin/sh
set -e
# The groups exist before 60-linnet.rules is unpacked: udevd parses a new rules file
# as soon as it sees it, and a GROUP= naming a group that does not exist yet is
# dropped ("Unknown group 'gpio', ignoring") and stays dropped, as the file does not
# change again: on Debian 12's udev the chips stayed root:root and the button dead
# (found on the virtual board, board/vm). The unit asks for these groups
# (SupplementaryGroups=); a system without GPIO or SPI gets empty ones so that the
# service can still start. The ones made here are recorded, so that purge removes them
# and never a group the system had.
# (addgroup is adduser's, a Depends, so it may not be unpacked yet on a first install
# into a system without it: postinst makes the user and groups then, and has udevd
# re-read the rules.)
# The user is made here too, so that its home (where the record goes) is its own.
if { [ "$1" = install ] || [ "$1" = upgrade ]; } && command -v addgroup >/dev/null; then
    if ! getent passwd linnet >/dev/null; then
        adduser --system --group --home /var/lib/linnet \
            --gecos "Linnet voice agent" linnet >/dev/null
    fi
    for g in gpio spi; do
        if ! getent group "$g" >/dev/null; then
            addgroup --system "$g" >/dev/null
            mkdir -p /var/lib/linnet
            echo "$g" >> /var/lib/linnet/created-groups
        fi
    done
fi
exit 0
SCRIPT

cat > "$root/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    if ! getent passwd linnet >/dev/null; then
        adduser --system --group --home /var/lib/linnet \
            --gecos "Linnet voice agent" linnet >/dev/null
    fi
    # The groups when preinst could not make them (no adduser yet): the rules file is
    # touched so that udevd parses it again, now that its groups exist.
    for g in gpio spi; do
        if ! getent group "$g" >/dev/null; then
            addgroup --system "$g" >/dev/null
            echo "$g" >> /var/lib/linnet/created-groups
            touch /lib/udev/rules.d/60-linnet.rules
        fi
    done
    for g in audio gpio spi; do
        if getent group "$g" >/dev/null; then adduser linnet "$g" >/dev/null 2>&1 || true; fi
    done
    # The GPIO chips and SPI devices already there take the groups' rules now, not at
    # the next boot (60-linnet.rules).
    if command -v udevadm >/dev/null && [ -d /run/udev ]; then
        udevadm control --reload-rules >/dev/null 2>&1 || true
        udevadm trigger --action=add --subsystem-match=gpio --subsystem-match=spidev >/dev/null 2>&1 || true
    fi
    chmod 0755 /etc/linnet
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
        # An upgrade restarts a running agent; a first install waits to be enabled
        # (the route and token must be set first: see the README).
        if [ -n "$2" ]; then systemctl try-restart linnet.service || true; fi
    fi
fi
exit 0
SCRIPT

cat > "$root/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl stop linnet.service || true
fi
exit 0
SCRIPT

cat > "$root/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
case "$1" in
    remove)
        [ -d /run/systemd/system ] && systemctl daemon-reload || true
        ;;
    purge)
        rm -f /etc/systemd/system/multi-user.target.wants/linnet.service
        if getent passwd linnet >/dev/null; then deluser --system linnet >/dev/null 2>&1 || true; fi
        if getent group linnet >/dev/null; then delgroup --system linnet >/dev/null 2>&1 || true; fi
        # The gpio and spi groups postinst made (and nothing else the record may name),
        # once no user has them as a supplementary or primary group.
        if [ -f /var/lib/linnet/created-groups ]; then
            for g in $(sort -u /var/lib/linnet/created-groups); do
                case "$g" in gpio|spi) ;; *) continue ;; esac
                entry=$(getent group "$g") || continue
                gid=$(echo "$entry" | cut -d: -f3)
                members=$(echo "$entry" | cut -d: -f4)
                if [ -z "$members" ] && ! cut -d: -f4 /etc/passwd | grep -qx "$gid"; then
                    delgroup --system "$g" >/dev/null 2>&1 || true
                fi
            done
        fi
        rm -rf /etc/linnet /var/lib/linnet
        [ -d /run/systemd/system ] && systemctl daemon-reload || true
        ;;
esac
exit 0
SCRIPT
chmod 0755 "$root/DEBIAN/preinst" "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

mkdir -p "$outdir"
deb=$outdir/linnet_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "built $deb ($(stat -c %s "$deb") bytes)"
