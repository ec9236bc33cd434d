#!/usr/bin/env bash
# Tests the Debian package on this machine: install, files (the DEP-5 copyright and the
# changelog included), user, conffile, the binary's selftest from /usr/bin, the installed
# unit (systemd-analyze verify and security), upgrade keeping a changed conffile, purge
# and its cleanup — the gpio/spi groups postinst made go, a group the system had stays,
# and so does one someone else is in. Then checks the arm64 package's contents and
# control fields, if one is given.
#
# usage: scripts/test-deb.sh HOST_BINARY [ARM64_DEB]
# Needs root (dpkg -i); changes the system only while it runs (it purges at the end,
# also on failure). Refuses to run if a linnet package is already installed.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:?usage: test-deb.sh HOST_BINARY [ARM64_DEB]}
arm64_deb=${2:-}
[ "$(id -u)" = 0 ] || { echo "test-deb.sh needs root (dpkg -i)" >&2; exit 1; }
if dpkg-query -W -f='${Status}' linnet 2>/dev/null | grep -q installed; then
  echo "a linnet package is installed already; not touching it" >&2
  exit 1
fi

work=$(mktemp -d)
# Groups: spi stands for one the system had (made here if missing, removed at the end);
# gpio, when missing, is the one postinst makes.
made_spi=
if ! getent group spi >/dev/null; then addgroup --system spi >/dev/null; made_spi=yes; fi
gpio_before=$(getent group gpio >/dev/null && echo yes || true)
cleanup() {
  dpkg --purge linnet >/dev/null 2>&1 || true
  [ -n "$made_spi" ] && delgroup --system spi >/dev/null 2>&1 || true
  if [ -z "$gpio_before" ] && getent group gpio >/dev/null; then
    deluser nobody gpio >/dev/null 2>&1 || true
    delgroup --system gpio >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
check() {  # check "what" command…
  local what=$1; shift
  if "$@" >/dev/null 2>&1; then echo "ok    $what"; else echo "FAIL  $what" >&2; fails=$((fails + 1)); fi
}

# DEP-5: each license short name a Files paragraph uses ("A and B", "A or B") needs a
# stand-alone License paragraph with its text.
licenses_have_texts() {
  awk 'BEGIN { RS = ""; FS = "\n" }
    $1 ~ /^Files:/ { for (i = 1; i <= NF; i++) if ($i ~ /^License: /) {
        n = split(substr($i, 10), names, / and | or /); for (j = 1; j <= n; j++) used[names[j]] = 1 } }
    $1 ~ /^License: / && NF > 1 && $2 ~ /^ / { defined[substr($1, 10)] = 1 }
    END { for (u in used) if (!(u in defined)) { print "no license text for " u > "/dev/stderr"; bad = 1 }; exit bad }' "$1"
}

base=$("$top/scripts/version.sh")
VERSION=$base "$top/scripts/build-deb.sh" "$bin" "$work/v1" >/dev/null
VERSION=$base+1 "$top/scripts/build-deb.sh" "$bin" "$work/v2" >/dev/null
deb1=$(ls "$work"/v1/linnet_*.deb)
deb2=$(ls "$work"/v2/linnet_*.deb)

# Install.
dpkg -i "$deb1" >/dev/null
check "installed version $base" test "$(dpkg-query -W -f='${Version}' linnet)" = "$base"
check "/usr/bin/linnet executable" test -x /usr/bin/linnet
check "unit in /lib/systemd/system" test -f /lib/systemd/system/linnet.service
check "udev rule for the gpio and spi groups" sh -c 'grep -q "SUBSYSTEM==\"gpio\", KERNEL==\"gpiochip\[0-9\]\*\", GROUP=\"gpio\", MODE=\"0660\"" /lib/udev/rules.d/60-linnet.rules' 
check "/etc/linnet/linnet.conf" test -f /etc/linnet/linnet.conf
check "board profiles in /usr/share/linnet/board" test -f /usr/share/linnet/board/respeaker-2mic/linnet.conf
for m in okay_nabu hey_jarvis alexa hey_mycroft; do
  check "wake model $m (.tflite, .json) in /usr/share/linnet/wake" test -s /usr/share/linnet/wake/$m.tflite -a -s /usr/share/linnet/wake/$m.json
done
check "the wake models' licence beside them" grep -q "Apache License" /usr/share/linnet/wake/LICENSE
check "linnet.conf is a conffile" sh -c "dpkg-query -W -f='\${Conffiles}' linnet | grep -q ' /etc/linnet/linnet.conf '"
check "system user linnet" sh -c 'uid=$(id -u linnet) && [ "$uid" -lt 1000 ]'
check "user has no login shell" sh -c 'getent passwd linnet | grep -Eq ":/(usr/)?s?bin/(nologin|false)$"'
for g in audio gpio spi; do
  check "linnet in group $g" sh -c "id -nG linnet | tr ' ' '\n' | grep -qx $g"
done
check "linnet selftest from /usr/bin" /usr/bin/linnet selftest
verify=$(systemd-analyze verify /lib/systemd/system/linnet.service 2>&1 || echo "exit status $?")
check "systemd-analyze verify installed unit is clean${verify:+: $verify}" test -z "$verify"
check "systemd-analyze security ≤ 2.0" "$top/scripts/check-unit.sh" /lib/systemd/system/linnet.service
verify=$(systemd-analyze verify /lib/systemd/system/linnet-provision.service 2>&1 || echo "exit status $?")
check "systemd-analyze verify linnet-provision.service is clean${verify:+: $verify}" test -z "$verify"
check "linnet-provision installed disabled" sh -c '! systemctl is-enabled --quiet linnet-provision 2>/dev/null'
# (Its keys are checked by Tests/AgentTests BoardConfigTests, which parses every profile.)
check "/etc/linnet/linnet.conf is the usb profile" cmp /etc/linnet/linnet.conf "$top/board/usb/linnet.conf"
check "state directory /var/lib/linnet owned by linnet" sh -c 'test "$(stat -c %U /var/lib/linnet)" = linnet'
check "copyright in DEP-5 format" sh -c "head -n 1 /usr/share/doc/linnet/copyright | grep -qx 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/'"
for lib in "opus/\*:BSD-3-clause and BSD-2-clause" "mbedtls/\*:Apache-2.0" "libsrtp/\*:BSD-3-clause~Cisco" "libgpiod/\*:LGPL-2.1+" \
           "usr/share/linnet/wake/\*:Apache-2.0"; do
  check "copyright names ${lib%%:*} under ${lib#*:}" \
    sh -c "grep -A 20 -x 'Files: ${lib%%:*}' /usr/share/doc/linnet/copyright | grep -m 1 '^License:' | grep -qxF 'License: ${lib#*:}'"
done
check "every license a Files paragraph names has a stand-alone text" licenses_have_texts /usr/share/doc/linnet/copyright
check "changelog.gz (native package) is a Debian changelog" sh -c "zcat /usr/share/doc/linnet/changelog.gz | head -n 1 | grep -q '^linnet ($base) '"
if [ -z "$gpio_before" ]; then
  check "postinst recorded the gpio group it made, not spi" sh -c 'test "$(cat /var/lib/linnet/created-groups)" = gpio'
fi

# Upgrade with a locally changed conffile: the change must survive.
echo "# changed by test-deb.sh" >> /etc/linnet/linnet.conf
dpkg -i --force-confold "$deb2" >/dev/null
check "upgraded to $base+1" test "$(dpkg-query -W -f='${Version}' linnet)" = "$base+1"
check "changed conffile kept on upgrade" grep -q "changed by test-deb.sh" /etc/linnet/linnet.conf
check "user kept on upgrade" id linnet

# Remove keeps the config; purge removes config and user.
dpkg -r linnet >/dev/null
check "remove: binary gone" test ! -e /usr/bin/linnet
check "remove: conffile kept" test -f /etc/linnet/linnet.conf
dpkg --purge linnet >/dev/null
check "purge: /etc/linnet gone" test ! -e /etc/linnet
check "purge: /var/lib/linnet gone" test ! -e /var/lib/linnet
check "purge: user gone" sh -c '! getent passwd linnet'
check "purge: group gone" sh -c '! getent group linnet'
check "purge: package gone" sh -c "! dpkg-query -W -f='\${Status}' linnet 2>/dev/null | grep -q installed"
check "purge: the spi group the system had is kept" getent group spi
if [ -z "$gpio_before" ]; then
  check "purge: the gpio group postinst made is gone" sh -c '! getent group gpio'
  # Again, with someone else in gpio: purge must leave it.
  dpkg -i "$deb1" >/dev/null
  adduser nobody gpio >/dev/null
  dpkg --purge linnet >/dev/null
  check "purge: a gpio group with another member is kept" sh -c 'getent group gpio | cut -d: -f4 | grep -qx nobody'
  deluser nobody gpio >/dev/null 2>&1 || true
  delgroup --system gpio >/dev/null 2>&1 || true
else
  echo "skip  gpio existed before the install: the made-by-postinst case is not tested here"
fi

# The arm64 package: control fields and contents (it cannot be installed here).
if [ -n "$arm64_deb" ]; then
  check "arm64: Architecture arm64" test "$(dpkg-deb -f "$arm64_deb" Architecture)" = arm64
  check "arm64: Package linnet" test "$(dpkg-deb -f "$arm64_deb" Package)" = linnet
  check "arm64: Version $base" test "$(dpkg-deb -f "$arm64_deb" Version)" = "$base"
  depends=$(dpkg-deb -f "$arm64_deb" Depends)
  check "arm64: Depends only adduser, libasound2 and libc6 ($depends)" \
    sh -c "echo '$depends' | tr ',' '\n' | sed 's/ *(.*//; s/^ *//' | sort | tr '\n' ' ' | grep -qx 'adduser libasound2 libc6 '"
  contents=$(dpkg-deb -c "$arm64_deb")
  for f in ./usr/bin/linnet ./lib/systemd/system/linnet.service ./etc/linnet/linnet.conf \
           ./lib/systemd/system/linnet-provision.service ./usr/lib/linnet/linnet-provision; do
    check "arm64: contains $f" grep -q " $f\$" <<<"$contents"
  done
  mkdir -p "$work/arm64"
  dpkg-deb -x "$arm64_deb" "$work/arm64"
  check "arm64: binary is AArch64" sh -c "readelf -h '$work/arm64/usr/bin/linnet' | grep -q AArch64"
  check "arm64: binary is stripped" sh -c "! readelf -S '$work/arm64/usr/bin/linnet' | grep -q '\.symtab'"
  # Full RELRO (-z now) and packed relocations, as scripts/embedded-build.sh links it
  check "arm64: binary binds now (full RELRO)" sh -c "readelf -d '$work/arm64/usr/bin/linnet' | grep -q 'FLAGS.*BIND_NOW'"
  check "arm64: relative relocations packed (DT_RELR)" sh -c "readelf -d '$work/arm64/usr/bin/linnet' | grep -q '(RELR)'"
  check "arm64: conffiles lists linnet.conf" sh -c "dpkg-deb -I '$arm64_deb' conffiles | grep -qx /etc/linnet/linnet.conf"
  check "arm64: maintainer scripts" sh -c "dpkg-deb -I '$arm64_deb' | grep -q postinst && dpkg-deb -I '$arm64_deb' | grep -q postrm"
fi

if [ "$fails" -gt 0 ]; then
  echo "test-deb: $fails check(s) failed" >&2
  exit 1
fi
echo "test-deb: all checks passed"
