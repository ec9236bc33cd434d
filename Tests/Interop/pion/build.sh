#!/bin/sh
# Builds the pion test peer offline from Debian's packages and prints the binary's
# path as its last line. Idempotent: a stamp of the sources, the Go version and the
# pion package version skips the build when nothing changed.
# Usage: Tests/Interop/pion/build.sh [OUT_DIR]   (default: build/pion)
#
# Debian keeps pion/webrtc v3 in /usr/share/gocode/src/github.com/pion/webrtc (no /v3
# directory), so `import "github.com/pion/webrtc/v3"` resolves only in GOPATH mode,
# through Go's minimal module compatibility, for a package that has a go.mod and sits
# inside a GOPATH src tree. The sources are therefore copied to
# OUT_DIR/gopath/src/linnet.test/pionpeer and built there with GO111MODULE=off,
# GOPROXY=off and GOPATH=OUT_DIR/gopath:/usr/share/gocode: nothing is downloaded.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-"$root/build/pion"}
bin="$out/pionpeer"

# What the peer and its tests need from Debian 12: Go, pion (it pulls the other pion
# packages and golang.org/x/net) and opus-tools (opusenc/opusdec, used by the tests).
packages="golang-go golang-github-pion-webrtc.v3-dev opus-tools"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    n=$(echo $missing | wc -w)
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing $n packages…$missing" >&2
        export DEBIAN_FRONTEND=noninteractive
        install() { apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 $missing >&2; }
        install || { apt-get update -q -o DPkg::Lock::Timeout=300 >&2 && install; }
    else
        echo "error: missing Debian packages:$missing (run as root, or scripts/setup.sh)" >&2
        exit 69
    fi
fi

go=$(command -v go || echo /usr/lib/go/bin/go)
pion_version=$(dpkg-query -W -f='${Version}' golang-github-pion-webrtc.v3-dev)
sources=$(cd "$here" && ls go.mod *.go)
want="$("$go" version) pion $pion_version $(cd "$here" && cat $sources | sha256sum | cut -d' ' -f1)"
stamp="$out/.stamp"
if [ -x "$bin" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "pion peer up to date: $bin" >&2
    echo "$bin"
    exit 0
fi

pkg="$out/gopath/src/linnet.test/pionpeer"
rm -rf "$pkg"
mkdir -p "$pkg"
(cd "$here" && cp $sources "$pkg/")
echo "building the pion peer (pion $pion_version, $("$go" version | cut -d' ' -f3))" >&2
(
    cd "$pkg"
    GO111MODULE=off GOPROXY=off GOFLAGS= GOPATH="$out/gopath:/usr/share/gocode" GOCACHE="$out/gocache" \
        "$go" build -o "$bin.new" -ldflags "-X main.pionVersion=${pion_version%%-*}" .
)
mv "$bin.new" "$bin"
echo "$want" > "$stamp"
echo "pion peer built: $bin" >&2
echo "$bin"
