#!/usr/bin/env bash
# Installs every Debian package Linnet's builds and tests need, idempotently, on
# Debian 12 (bookworm). Run as root (or with sudo). Swift itself is not a Debian
# package: it must already be installed (swift.org's toolchain, e.g. under /opt/swift).
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  exec sudo "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive

# arm64 libraries for the cross build come from Debian multiarch.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
fi

# libsrtp is rebuilt from Debian's source package against mbedtls (see README), which
# needs a deb-src entry.
src=/etc/apt/sources.list.d/linnet-src.sources
if [ ! -f "$src" ]; then
  cat > "$src" <<'SOURCES'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
fi

packages=(
  # C libraries, host (full-Swift build and tests)
  libasound2-dev libopus-dev libsrtp2-dev libmbedtls-dev libgpiod-dev
  # the same for arm64, and the cross toolchain
  gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu libc6-dev:arm64
  libasound2-dev:arm64 libopus-dev:arm64 libmbedtls-dev:arm64 libgpiod-dev:arm64
  # running arm64 binaries here, rebuilding libsrtp, ALSA tools, measuring
  qemu-user-static cmake dpkg-dev pkg-config alsa-utils valgrind python3 binutils systemd adduser openssl
  # the GStreamer webrtcbin interop peer (Tests/Interop/gst-setup.sh checks the same list)
  python3-gi python3-gst-1.0 gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0
  gir1.2-gst-plugins-bad-1.0 gir1.2-nice-0.1 gstreamer1.0-nice gstreamer1.0-plugins-base
  gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
need_update=0
[ ${#missing[@]} -gt 0 ] && need_update=1
# apt-get source needs the deb-src lists.
ls /var/lib/apt/lists/*_source_Sources >/dev/null 2>&1 || need_update=1
if [ "$need_update" = 1 ]; then
  apt-get update -q
fi
if [ ${#missing[@]} -gt 0 ]; then
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if ! command -v swiftc >/dev/null 2>&1 && [ ! -x /opt/swift/usr/bin/swiftc ]; then
  echo "setup: Swift 6.3 is not installed (no swiftc on PATH or in /opt/swift)." >&2
  echo "       Install the swift.org toolchain for Debian 12, then run this again." >&2
  exit 69
fi
echo "setup: all packages present"
