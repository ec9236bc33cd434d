#!/usr/bin/env bash
# Builds libopus 1.3.1 for arm64 from Debian's source package, as a static library for
# the release binary, configured for what Linnet uses:
# - no custom modes: Debian configures --enable-custom-modes (non-Opus CELT modes such as
#   44.1 kHz), whose mode-building code the release binary carried; Linnet speaks
#   standard Opus at 48 kHz only;
# - NEON presumed, no run-time CPU detection: Advanced SIMD is part of every ARMv8-A
#   CPU Debian's arm64 runs on, so the C fallbacks and the dispatch tables Debian's
#   build keeps beside the NEON code are never used. The NEON functions are the same
#   ones, so the packets are the ones Debian's library gives on a Pi;
# - one section per function and per global, so --gc-sections also drops the functions
#   Linnet never reaches inside the objects it does use (Debian's archive could only
#   be pruned an object at a time);
# - no unwind tables, as the other C libraries of the release build (embedded-build.sh
#   says what a crash loses);
# - the hardening checks kept, their text shortened: Debian's configure enables
#   ENABLE_HARDENING (cheap invariant checks that abort rather than read or write out of
#   bounds on a corrupt state, which packets from the network must never reach). Each
#   check carried its condition's source text and the build tree's full path of its file,
#   13 KB of strings. The message names the file and line (__FILE_NAME__, gcc 12), which
#   find the check in opus 1.3.1's source as exactly, so the checks stay as they are and
#   only their text goes (celt/arch.h's CELT_FATAL, patched below; the build path no
#   longer ends up in the binary either);
# - -O2, as Debian builds it: Opus is nearly all of a call's instructions. Stop 29 built
#   the objects a call barely reaches at -Os (19 KB off, about 2 % more Opus instructions
#   a call: encode +1.6 %, decode +6.4 %, `OPUS_A=… KERNELS=opus bench/audio.sh arm64`)
#   while the binary was over its 1.5 MB goal; once the Swift side came well under it
#   (scripts/osize-flags.sh), the instructions were worth more than the bytes.
# The full-Swift build and the tests use Debian's libopus as it is; the host release
# build links a copy of Debian's libopus.a (x86 has no NEON to presume: its run-time
# detection picks SSE4.1 or AVX).
#
# usage: scripts/build-opus.sh   → build/third_party/arm64/lib/libopus.a
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/third_party/arm64
# Rebuilt when this script changes.
stamp=$(sha256sum <"$0" | cut -c1-16)
mkdir -p "$top/build/third_party" "$out/lib"
exec 8>"$top/build/third_party/opus-arm64.lock"; flock 8
[ -f "$out/lib/libopus.a" ] && [ "$(cat "$out/.opus-stamp" 2>/dev/null)" = "$stamp" ] && exit 0
src=$top/build/third_party/src
mkdir -p "$src"
# The download directory is shared with the other source builds.
exec 9>"$src/.lock"; flock 9
if [ ! -f "$src/opus_1.3.1-3.dsc" ]; then
  (cd "$src" && apt-get source --download-only opus=1.3.1-3 >/dev/null 2>&1 || apt-get source --download-only opus >/dev/null)
fi
flock -u 9
tree=$src/opus-arm64
rm -rf "$tree"
# Debian's one patch corrects comments in two headers. dpkg-source keeps the tarball's
# timestamps, so configure is not regenerated (no autotools needed).
(cd "$src" && dpkg-source -x opus_1.3.1*.dsc "$tree" >"$tree.log" 2>&1) || { cat "$tree.log"; exit 1; }
# (The line has no character that is special in a basic regular expression.)
fatal='#define CELT_FATAL(str) celt_fatal(str, __FILE__, __LINE__);'
grep -qxF "$fatal" "$tree/celt/arch.h" || { echo "opus: celt/arch.h has no '$fatal' to shorten" >&2; exit 1; }
sed -i "s|^$fatal\$|#define CELT_FATAL(str) celt_fatal(\"assertion failed\", __FILE_NAME__, __LINE__);|" "$tree/celt/arch.h"
grep -qF '__FILE_NAME__' "$tree/celt/arch.h" || { echo "opus: celt/arch.h was not shortened" >&2; exit 1; }
bld=$top/build/third_party/opus-build-arm64
rm -rf "$bld" "$bld-O2" "$bld-Os" "$top/build/third_party/opus-mix-arm64"; mkdir -p "$bld"
(cd "$bld" && CC=aarch64-linux-gnu-gcc \
  CFLAGS="-O2 -ffunction-sections -fdata-sections -fno-asynchronous-unwind-tables -fno-unwind-tables" \
  "$tree/configure" --host=aarch64-linux-gnu --disable-shared --enable-static --with-pic \
  --disable-rtcd --disable-doc --disable-extra-programs) >"$bld.log" 2>&1 \
  || { tail -40 "$bld.log"; exit 1; }
for want in '^#define OPUS_ARM_PRESUME_AARCH64_NEON_INTR 1' '^/\* #undef OPUS_HAVE_RTCD \*/' \
            '^/\* #undef CUSTOM_MODES \*/' '^/\* #undef FIXED_POINT \*/' '^#define ENABLE_HARDENING 1'; do
  grep -q "$want" "$bld/config.h" || { echo "opus: config.h lacks '$want' (see $bld.log)" >&2; exit 1; }
done
make -C "$bld" -j"$(nproc)" >>"$bld.log" 2>&1 || { tail -40 "$bld.log"; exit 1; }
cp "$bld/.libs/libopus.a" "$out/lib/libopus.a"
echo "$stamp" >"$out/.opus-stamp"
echo "libopus (no custom modes, NEON presumed) for arm64 → $out/lib/libopus.a"
