#!/usr/bin/env bash
# Builds speexdsp 1.2.1 from Debian's source package, with Linnet's MDF tuning
# (scripts/speexdsp/linnet-mdf-tuning.patch), as a static floating-point library for
# one architecture. Both builds link it: the full-Swift build through pkg-config (the
# Makefile exports PKG_CONFIG_PATH), the release build directly. So the tests measure
# the canceller that ships.
#
# Why not Debian's libspeexdsp: its canceller converges slower and cancels less than
# Linnet needs (about 2 s, 25 dB); the patch's two changes (a faster initial learning
# rate, a steadier leak estimate) take ERLE up by about 6 dB and convergence down by
# about 0.6 s (figures in the patch). Why floating point, not FIXED_POINT: on
# EchoCancellerTests' rooms the fixed-point MDF lost 3-5 dB of ERLE (RT60 0.5 s: 14.5 dB
# against 19.4 alone) and cost more instructions a frame (bench/audio.sh embedded,
# aec_instructions_per_frame_osize: 1.62 M fixed, 1.34 M float on x86-64); a Pi's
# Cortex-A53 has a hardware FPU.
#
# usage: scripts/build-speexdsp.sh host|arm64
#   → build/third_party/speexdsp/<arch>/{include, lib/liblinnet-speexdsp.a, lib/pkgconfig}
set -euo pipefail
arch=${1:?usage: build-speexdsp.sh host|arm64}
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/third_party/speexdsp/$arch
patch=$top/scripts/speexdsp/linnet-mdf-tuning.patch
# Rebuilt when this script or the patch changes.
stamp=$(cat "$0" "$patch" | sha256sum | cut -c1-16)
# Two builds may run side by side (.ci/run: the host and arm64 release builds, each
# asking for the host library first through `make deps`): one builds an architecture
# while another asking for it waits, then finds it built.
mkdir -p "$top/build/third_party"
exec 8>"$top/build/third_party/speexdsp-$arch.lock"; flock 8
[ -f "$out/lib/liblinnet-speexdsp.a" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ] && exit 0
src=$top/build/third_party/src
mkdir -p "$src"
# The download is shared by both architectures: one fetches it while the other waits.
exec 9>"$src/.lock"; flock 9
if [ ! -f "$src/speexdsp_1.2.1-1.dsc" ]; then
  (cd "$src" && apt-get source --download-only speexdsp=1.2.1-1 >/dev/null 2>&1 || apt-get source --download-only speexdsp >/dev/null)
fi
flock -u 9
# A fresh tree each time, so the patch always applies to Debian's pristine source; one
# per architecture, so that two builds do not unpack over each other.
tree=$src/speexdsp-linnet-$arch
rm -rf "$tree"
# (dpkg-source warns that it cannot check the signature: apt checked the files' hashes.)
(cd "$src" && dpkg-source -x --skip-patches speexdsp_1.2.1*.dsc "$tree" >"$tree.log" 2>&1) || { cat "$tree.log"; exit 1; }
patch -s -d "$tree" -p1 <"$patch"
bld=$top/build/third_party/speexdsp-build-$arch
rm -rf "$bld" "$out"; mkdir -p "$bld"
host=()
cc=gcc
if [ "$arch" = arm64 ]; then
  host=(--host=aarch64-linux-gnu)
  cc=aarch64-linux-gnu-gcc
fi
# DISABLE_WARNINGS: speexdsp would print to stderr from the audio thread (its canceller
# reports a reset there). NEON and SSE only speed up the resampler, which Linnet does not use.
(cd "$bld" && CC=$cc CFLAGS="-O2 -fPIC -ffunction-sections -fdata-sections -fno-asynchronous-unwind-tables -fno-unwind-tables -DDISABLE_WARNINGS" \
  "$tree/configure" "${host[@]}" --prefix="$out" \
  --disable-shared --enable-static --disable-neon --disable-sse --disable-examples) >"$bld.log" 2>&1 \
  || { tail -40 "$bld.log"; exit 1; }
make -C "$bld" -j"$(nproc)" >>"$bld.log" 2>&1 || { tail -40 "$bld.log"; exit 1; }
make -C "$bld" install >>"$bld.log" 2>&1 || { tail -40 "$bld.log"; exit 1; }
grep -q '^#define FLOATING_POINT' "$bld/config.h" || { echo "speexdsp: not configured floating-point" >&2; exit 1; }
grep -q LINNET_ECHO_GET_TUNING "$out/include/speex/speex_echo.h" || { echo "speexdsp: the tuning patch is missing" >&2; exit 1; }
# Under a name of its own, with a pkg-config file of its own: the full build's linker
# also searches Debian's library directory, which may hold Debian's libspeexdsp.so (and
# did come first for the executable); a build that misses this library fails to link.
rm -f "$out"/lib/*.la "$out"/lib/pkgconfig/speexdsp.pc
mv "$out/lib/libspeexdsp.a" "$out/lib/liblinnet-speexdsp.a"
cat >"$out/lib/pkgconfig/linnet-speexdsp.pc" <<PC
Name: linnet-speexdsp
Description: speexdsp 1.2.1 with Linnet's MDF tuning (scripts/build-speexdsp.sh)
Version: 1.2.1
Libs: -L$out/lib -llinnet-speexdsp
Cflags: -I$out/include
PC
echo "$stamp" >"$out/.stamp"
# SwiftPM does not relink when a static library it links changes: drop what the full
# build linked against the old one, so the next build links this one.
[ "$arch" = host ] && find "$top/.build" -maxdepth 3 \( -name linnet -o -name LinnetPackageTests.xctest -o -name linnet-bench \) -type f -delete 2>/dev/null || true
echo "speexdsp (floating point, Linnet's MDF tuning) for $arch → $out"
