#!/usr/bin/env bash
# Builds bench/LinnetBench against the product modules Wire, Audio, Codec and Wake, compiled
# the way a build compiles them (whole module, optimised), one module at a time.
# It is not a SwiftPM target: scripts/embedded-build.sh builds every non-test target
# of Package.swift into the release binary, so a second executable there would break it.
#
# usage: bench/build.sh full|embedded|arm64   → $BENCH_DIR/<mode>/linnet-bench
#   full      full Swift, -O (what `swift build -c release` uses)
#   embedded  Embedded Swift, -Osize, linked by gcc (what `make release` ships)
#   arm64     the same for aarch64 (the product's boards), against the arm64 C
#             libraries `make arm64` builds; bench/audio.sh counts it under qemu
set -euo pipefail
mode=${1:?usage: bench/build.sh full|embedded|arm64}
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
out=${BENCH_DIR:-$top/build/bench}/$mode
mkdir -p "$out"
swiftc=$(command -v swiftc)
# The release build's optimisation flags (-Osize and its inlining setting).
. scripts/osize-flags.sh
toolchain=$(cd "$(dirname "$swiftc")/.." && pwd)

case "$mode" in
  full) flags=(-O) ;;
  embedded) flags=(-target x86_64-unknown-linux-gnu -enable-experimental-feature Embedded "${osize_flags[@]}") ;;
  # As scripts/embedded-build.sh compiles for arm64: the toolchain's aarch64 Embedded
  # stdlib, with glibc's Debian multiarch headers.
  arm64) flags=(-target aarch64-none-none-elf -enable-experimental-feature Embedded "${osize_flags[@]}"
                -Xcc -isystem -Xcc /usr/aarch64-linux-gnu/include -Xcc -isystem -Xcc /usr/include
                -Xcc -D__linux__ -Xcc -D__unix__ -Xcc -D__aarch64__ -Xcc -D__gnu_linux__) ;;
  *) echo "unknown mode '$mode' (full, embedded or arm64)" >&2; exit 64 ;;
esac
arch=host cc=gcc
[ "$mode" = arm64 ] && arch=arm64 cc=aarch64-linux-gnu-gcc
# SwiftPM makes a module map for the C target CAllocCounter; here it is written out.
mkdir -p "$out/CAllocCounter"
printf 'module CAllocCounter {\n    header "%s"\n    export *\n}\n' \
  "$top/Tests/CAllocCounter/include/CAllocCounter.h" > "$out/CAllocCounter/module.modulemap"
# speexdsp: the tuned library both builds link (scripts/build-speexdsp.sh), so each
# mode measures what it ships.
scripts/build-speexdsp.sh $arch >/dev/null
spx=$top/build/third_party/speexdsp/$arch
speex=(-Xcc -I -Xcc "$spx/include")
common=(-wmo -parse-as-library -swift-version 6 -I "$out" -I Sources/COpus -I Sources/CSystem -I Sources/CSpeexDSP "${speex[@]}"
        -I "$out/CAllocCounter" "${flags[@]}")

rm -f "$out"/*.o
for m in Wire Audio Codec Wake; do
  mapfile -t files < <(find "Sources/$m" -name '*.swift' | sort)
  "$swiftc" "${common[@]}" -module-name "$m" -emit-module -emit-module-path "$out/$m.swiftmodule" \
    -c "${files[@]}" -o "$out/$m.o"
done
# The malloc-family interposer of the allocation tests, for the capture_allocations kernel.
$cc -O2 -c Tests/CAllocCounter/CAllocCounter.c -I Tests/CAllocCounter/include -o "$out/CAllocCounter.o"
# The echo-path simulation is the tests' own (pure Swift, no Foundation).
"$swiftc" "${common[@]}" -module-name LinnetBench -c bench/LinnetBench/*.swift Tests/AudioTests/EchoSimulation.swift Tests/AudioTests/EchoGrid.swift -o "$out/LinnetBench.o"

if [ "$mode" = full ]; then
  # -L: the CSpeexDSP module map links linnet-speexdsp by name (autolink).
  "$swiftc" -o "$out/linnet-bench" "$out"/*.o -lopus -L "$spx/lib" "$spx/lib/liblinnet-speexdsp.a" -lm
elif [ "$mode" = embedded ]; then
  gcc -o "$out/linnet-bench" "$out"/*.o /usr/lib/x86_64-linux-gnu/libopus.a "$spx/lib/liblinnet-speexdsp.a" -lm \
    -L"$toolchain/lib/swift/embedded/x86_64-unknown-linux-gnu" -lswiftUnicodeDataTables
else
  # The arm64 libopus the release binary links (scripts/build-opus.sh); OPUS_A=<path>
  # measures another build of it. Run under qemu-user with the cross glibc
  # (-L /usr/aarch64-linux-gnu).
  [ -n "${OPUS_A:-}" ] || scripts/build-opus.sh >/dev/null
  aarch64-linux-gnu-gcc -o "$out/linnet-bench" "$out"/*.o "${OPUS_A:-$top/build/third_party/arm64/lib/libopus.a}" \
    "$spx/lib/liblinnet-speexdsp.a" -lm \
    -L"$toolchain/lib/swift/embedded/aarch64-none-none-elf" -lswiftUnicodeDataTables
fi
echo "$out/linnet-bench"
