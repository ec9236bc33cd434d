#!/usr/bin/env bash
# Builds speexdsp 1.2.1 from Debian's source package as a static, fixed-point library
# (FIXED_POINT: the echo canceller and preprocessor run in integer arithmetic, as every
# other capture hook does), for one architecture.
#
# Why: Debian's libspeexdsp is built in floating point and the release binary links its
# C libraries statically. The full-Swift build and tests use Debian's libspeexdsp-dev;
# its API (spx_int16_t frames) is the same in both modes.
#
# usage: scripts/build-speexdsp.sh host|arm64   → build/third_party/<arch>/{include,lib}
set -euo pipefail
arch=${1:?usage: build-speexdsp.sh host|arm64}
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/third_party/$arch
[ -f "$out/lib/libspeexdsp.a" ] && exit 0
src=$top/build/third_party/src
mkdir -p "$src"
if [ ! -d "$src/speexdsp-1.2.1" ]; then
  (cd "$src" && apt-get source --download-only speexdsp=1.2.1-1 >/dev/null 2>&1 || apt-get source --download-only speexdsp >/dev/null)
  (cd "$src" && dpkg-source -x --skip-patches speexdsp_1.2.1*.dsc speexdsp-1.2.1 >/dev/null)
fi
bld=$top/build/third_party/speexdsp-build-$arch
rm -rf "$bld"; mkdir -p "$bld"
host=()
cc=gcc
if [ "$arch" = arm64 ]; then
  host=(--host=aarch64-linux-gnu)
  cc=aarch64-linux-gnu-gcc
fi
# DISABLE_WARNINGS: speexdsp would print to stderr from the audio thread (its canceller
# reports a reset there). NEON and SSE only speed up the resampler, which Linnet does not use.
(cd "$bld" && CC=$cc CFLAGS="-O2 -fPIC -ffunction-sections -fdata-sections -fno-asynchronous-unwind-tables -fno-unwind-tables -DDISABLE_WARNINGS" \
  "$src/speexdsp-1.2.1/configure" "${host[@]}" --prefix="$out" --enable-fixed-point \
  --disable-shared --enable-static --disable-neon --disable-sse --disable-examples) >"$bld.log" 2>&1 \
  || { tail -40 "$bld.log"; exit 1; }
make -C "$bld" -j"$(nproc)" >>"$bld.log" 2>&1 || { tail -40 "$bld.log"; exit 1; }
make -C "$bld" install >>"$bld.log" 2>&1 || { tail -40 "$bld.log"; exit 1; }
grep -q '^#define FIXED_POINT' "$bld/config.h" || { echo "speexdsp: not configured fixed-point" >&2; exit 1; }
echo "speexdsp (fixed point) for $arch → $out"
