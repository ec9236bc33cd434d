#!/usr/bin/env bash
# Builds libopus 1.3.1 for arm64 from Debian's source package, as a static library for
# the release binary, configured for what Linnet uses (issue 18):
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
# - -O2, as Debian builds it, for the objects where a call spends its instructions, and
#   -Os for the rest: Opus is nearly all of a call's instructions. All of it at -Os took
#   another 29 KB off but cost 13 % more instructions to encode (arm64, measured with
#   `OPUS_A=… KERNELS=opus bench/audio.sh arm64`), which the call's CPU cannot spare.
#   The objects kept at -O2 (`hot` below) are the ones with 1 % or more of the
#   instructions of a complexity-10 VOIP encode at 32 kbit/s with FEC plus the decode of
#   its packets (callgrind, per file), and every NEON object. The rest is mode setup,
#   control, table-driven quantisers and code a call rarely reaches. Measured against all
#   of it at -O2 (same bench, complexity 10): 19,048 bytes off the stripped binary, encode
#   +1.6 % instructions (2,302,786 → 2,339,743 per 20 ms frame), decode +6.4 % (264,393 →
#   281,317), about 2 % of the Opus work of a call. Adding celt_decoder and celt to the
#   list won back 2,354 decode instructions for 2,128 bytes: not kept.
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
# One configured tree per optimisation level; the archive is the -Os one with the hot
# objects replaced by their -O2 builds (archive members are named by file, and no two of
# opus' objects share a name).
for opt in O2 Os; do
  bld=$top/build/third_party/opus-build-arm64-$opt
  rm -rf "$bld"; mkdir -p "$bld"
  (cd "$bld" && CC=aarch64-linux-gnu-gcc \
    CFLAGS="-$opt -ffunction-sections -fdata-sections -fno-asynchronous-unwind-tables -fno-unwind-tables" \
    "$tree/configure" --host=aarch64-linux-gnu --disable-shared --enable-static --with-pic \
    --disable-rtcd --disable-doc --disable-extra-programs) >"$bld.log" 2>&1 \
    || { tail -40 "$bld.log"; exit 1; }
  for want in '^#define OPUS_ARM_PRESUME_AARCH64_NEON_INTR 1' '^/\* #undef OPUS_HAVE_RTCD \*/' \
              '^/\* #undef CUSTOM_MODES \*/' '^/\* #undef FIXED_POINT \*/' '^#define ENABLE_HARDENING 1'; do
    grep -q "$want" "$bld/config.h" || { echo "opus: config.h lacks '$want' (see $bld.log)" >&2; exit 1; }
  done
  make -C "$bld" -j"$(nproc)" >>"$bld.log" 2>&1 || { tail -40 "$bld.log"; exit 1; }
done
hot="NSQ_del_dec warped_autocorrelation_FLP kiss_fft inner_product_FLP NLSF_del_dec_quant
     analysis LPC_analysis_filter_FLP opus_encoder mdct vq bands resampler_private_IIR_FIR
     celt_encoder mlp decode_core burg_modified_FLP resampler_private_down_FIR
     armcpu arm_celt_map celt_neon_intr pitch_neon_intr arm_silk_map biquad_alt_neon_intr
     LPC_inv_pred_gain_neon_intr NSQ_del_dec_neon_intr NSQ_neon"
mix=$top/build/third_party/opus-mix-arm64
rm -rf "$mix"; mkdir -p "$mix"
cp "$top/build/third_party/opus-build-arm64-Os/.libs/libopus.a" "$mix/libopus.a"
(cd "$mix" && aarch64-linux-gnu-ar x "$top/build/third_party/opus-build-arm64-O2/.libs/libopus.a")
members=$(aarch64-linux-gnu-ar t "$mix/libopus.a")
objs=()
for o in $hot; do
  # A name that is not a member (a renamed file in another opus) must fail, not drop out.
  grep -qx "$o.o" <<<"$members" || { echo "opus: no $o.o in the archive for the -O2 list" >&2; exit 1; }
  objs+=("$mix/$o.o")
done
aarch64-linux-gnu-ar r "$mix/libopus.a" "${objs[@]}"
[ "$(aarch64-linux-gnu-ar t "$mix/libopus.a")" = "$members" ] || { echo "opus: mixing -O2 objects changed the archive's members" >&2; exit 1; }
cp "$mix/libopus.a" "$out/lib/libopus.a"
echo "$stamp" >"$out/.opus-stamp"
echo "libopus (no custom modes, NEON presumed, -O2 where a call is spent, -Os elsewhere) for arm64 → $out/lib/libopus.a"
