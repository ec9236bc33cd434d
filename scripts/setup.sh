#!/usr/bin/env bash
# Installs every Debian package Linnet's builds and tests need, idempotently, on
# Debian 12 (bookworm). Swift itself is not a Debian package: it must already be
# installed (swift.org's toolchain, e.g. under /opt/swift).
#
# It checks first and needs root only when something is missing: then it re-runs itself
# through sudo (or says what to install when there is no sudo). `--quiet` prints nothing
# when everything is there (what every `make` target runs); otherwise it says what it
# installs before apt starts, so a first `make test` is never silent for minutes.
#
# `--demo` installs only what `make demo` needs (the host's C libraries, and what
# rebuilding speexdsp from Debian's source takes): a newcomer's first command should not
# pull in Go, coturn, GStreamer and an arm64 toolchain.
set -euo pipefail
quiet=0
demo=0
for arg in "$@"; do
  case "$arg" in
    --quiet) quiet=1 ;;
    --demo) demo=1 ;;
    *) echo "usage: scripts/setup.sh [--quiet] [--demo]" >&2; exit 2 ;;
  esac
done
say() { echo "setup: $*" >&2; }

packages=(
  # C libraries, host (full-Swift build and tests)
  libasound2-dev libopus-dev libsrtp2-dev libmbedtls-dev libgpiod-dev libspeexdsp-dev
  # the cross toolchain and its C library: gcc-aarch64-linux-gnu only *recommends*
  # libc6-dev-arm64-cross, whose /usr/aarch64-linux-gnu holds the headers, crt files
  # and loader the arm64 build, link and qemu runs use
  gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu libc6-dev-arm64-cross libc6-dev:arm64
  # arm64 libraries from Debian multiarch
  libasound2-dev:arm64 libopus-dev:arm64 libmbedtls-dev:arm64 libgpiod-dev:arm64
  # running arm64 binaries here, rebuilding libsrtp, ALSA tools, measuring
  qemu-user-static cmake dpkg-dev pkg-config alsa-utils valgrind python3 binutils systemd adduser openssl
  # the pion interop peer and the Ogg/Opus tools its tests use (Tests/Interop/pion/build.sh
  # checks the same list)
  golang-go golang-github-pion-webrtc.v3-dev opus-tools
  # TURN: the server the client is tested against (ICETests/CoturnTests), and the
  # calls through it (CLITests/TURNCallTests, bench/turn.sh) in network namespaces with
  # a firewall
  coturn nftables iproute2
  # the GStreamer webrtcbin interop peer (Tests/Interop/gst-setup.sh checks the same list)
  python3-gi python3-gst-1.0 gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0
  gir1.2-gst-plugins-bad-1.0 gir1.2-nice-0.1 gstreamer1.0-nice gstreamer1.0-plugins-base
  gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
  # the virtual board (board/vm, make vboard): the arm64 machine, its disk image made
  # with mmdebstrap (under qemu-user-static, above; for a foreign architecture it
  # refuses to run without arch-test, and infers its sources' signed-by with gpg),
  # gpio-sim's module checked with modinfo, the harness's ssh into the guest
  qemu-system-arm qemu-utils mmdebstrap arch-test gpg e2fsprogs kmod xz-utils openssh-client
  # the SD card image (board/image, make image): its FAT partition made as a file and
  # filled without a loop device, and its partition table
  dosfstools mtools fdisk
  # fleet metrics: the textfile collector that serves Linnet's metrics file, and the
  # Prometheus server that scrapes it during a call (CLITests/OpenAITurnTests:
  # metricsReachNodeExporterAndAddUp, prometheusScrapesACall)
  prometheus-node-exporter prometheus
)

if [ "$demo" = 1 ]; then
  # The debug build and `linnet demo`: the C libraries it links, pkg-config, and
  # speexdsp's source package with what builds it (scripts/build-speexdsp.sh).
  packages=(libasound2-dev libopus-dev libsrtp2-dev libmbedtls-dev libgpiod-dev
            pkg-config dpkg-dev patch gcc make)
fi

# What is missing, found without root.
need_arch=0
[ "$demo" = 1 ] || dpkg --print-foreign-architectures | grep -qx arm64 || need_arch=1
# libsrtp is rebuilt from Debian's source package against mbedtls (see README), and
# speexdsp with Linnet's MDF tuning (scripts/build-speexdsp.sh), which
# needs a deb-src entry and its package lists.
src=/etc/apt/sources.list.d/linnet-src.sources
need_src=0
[ -f "$src" ] || need_src=1
need_lists=0
# (Lists may be kept compressed: `…_source_Sources.lz4`.)
ls /var/lib/apt/lists/*_source_Sources* >/dev/null 2>&1 || need_lists=1
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "$need_arch" = 0 ] && [ "$need_src" = 0 ] && [ "$need_lists" = 0 ] && [ ${#missing[@]} -eq 0 ]; then
  [ "$quiet" = 1 ] || say "all packages present"
else
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      say "${#missing[@]} Debian packages to install${missing:+ (${missing[*]})}; that needs root: running through sudo"
      exec sudo "$0" "$@"
    fi
    say "missing: ${missing[*]:-the arm64 architecture or the deb-src list}; run this script as root (there is no sudo)"
    exit 77
  fi
  export DEBIAN_FRONTEND=noninteractive
  if [ "$need_arch" = 1 ]; then
    say "adding the arm64 architecture (Debian multiarch)"
    dpkg --add-architecture arm64
  fi
  if [ "$need_src" = 1 ]; then
    cat > "$src" <<'SOURCES'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  fi
  say "updating the package lists"
  apt-get update -q >/dev/null
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${#missing[@]} Debian packages (a few minutes, once): ${missing[*]}"
    apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" \
      | grep -E --line-buffered '^(Unpacking|Setting up) ' | sed -u 's/^/setup:   /' >&2 || true
    still=()
    for p in "${missing[@]}"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || still+=("$p")
    done
    if [ ${#still[@]} -gt 0 ]; then
      say "apt could not install: ${still[*]} (see: apt-get install ${still[*]})"
      exit 69
    fi
  fi
  say "all packages present"
fi

if ! command -v swiftc >/dev/null 2>&1 && [ ! -x /opt/swift/usr/bin/swiftc ]; then
  say "Swift 6.3 is not installed (no swiftc on PATH or in /opt/swift)."
  say "Install the swift.org toolchain for Debian 12, then run this again."
  exit 69
fi
