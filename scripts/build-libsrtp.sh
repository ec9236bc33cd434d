#!/usr/bin/env bash
# Builds libsrtp 2.5 from Debian's source package as a static library whose crypto is
# mbedtls (the library Linnet already links for DTLS: the release build's own, from
# scripts/build-mbedtls.sh, whose headers carry its config), for one architecture.
#
# Why: Debian's libsrtp2.a is built on NSS, which has no static form, so the release
# binary could not stay free of NSS. Built against mbedtls, libsrtp adds no dependency
# and shares AES and HMAC-SHA1 with DTLS. AES_CM_128_HMAC_SHA1_80 output is
# byte-identical across libsrtp's crypto back ends (checked by the RFC 3711 vectors
# in the tests and by `linnet selftest`).
#
# usage: scripts/build-libsrtp.sh host|arm64   → build/third_party/<arch>/{include,lib}
set -euo pipefail
arch=${1:?usage: build-libsrtp.sh host|arm64}
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/third_party/$arch
"$top/scripts/build-mbedtls.sh" "$arch"
# Rebuilt when mbedtls (its config decides the structure layouts) or this script changed.
lib=$out/lib/libsrtp2.a
if [ -f "$lib" ] && [ "$lib" -nt "$out/lib/libmbedcrypto.a" ] && [ "$lib" -nt "$0" ] && [ "$lib" -nt "$top/scripts/clang-lto.sh" ]; then exit 0; fi
src=$top/build/third_party/src
mkdir -p "$src"
# The source tree is shared by both architectures, whose builds may run side by side
# (.ci/run): one unpacks it while the other waits.
exec 9>"$src/.lock"; flock 9
if [ ! -d "$src/libsrtp2-2.5.0" ]; then
  (cd "$src" && apt-get source --download-only libsrtp2=2.5.0-3 >/dev/null 2>&1 || apt-get source --download-only libsrtp2 >/dev/null)
  (cd "$src" && dpkg-source -x --skip-patches libsrtp2_2.5.0*.dsc libsrtp2-2.5.0 >/dev/null)
fi
flock -u 9
bld=$top/build/third_party/build-$arch
rm -rf "$bld"; mkdir -p "$bld"
extra=(-DMBEDTLS_LIBRARY="$out/lib/libmbedtls.a" -DMBEDX509_LIBRARY="$out/lib/libmbedx509.a"
       -DMBEDCRYPTO_LIBRARY="$out/lib/libmbedcrypto.a" -DMBEDTLS_INCLUDE_DIRS="$out/include")
# Bitcode for the release link's LTO, by the toolchain's clang at -Oz, as mbedtls
# (scripts/clang-lto.sh).
. "$top/scripts/clang-lto.sh"
extra+=("${lto_cmake[@]}")
cmake -S "$src/libsrtp2-2.5.0" -B "$bld" -DCMAKE_BUILD_TYPE=MinSizeRel \
  -DENABLE_MBEDTLS=ON -DBUILD_SHARED_LIBS=OFF -DLIBSRTP_TEST_APPS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_C_FLAGS="$lto_flags -I$out/include" \
  -DCMAKE_INSTALL_PREFIX="$out" "${extra[@]}" >"$bld.log" 2>&1 || { cat "$bld.log"; exit 1; }
# Only the library: its test drivers (built even without LIBSRTP_TEST_APPS) are not
# linked from bitcode here.
cmake --build "$bld" --target srtp2 -j"$(nproc)" >>"$bld.log" 2>&1 || { tail -40 "$bld.log"; exit 1; }
cmake --install "$bld" >>"$bld.log" 2>&1
echo "libsrtp2 (mbedtls crypto) for $arch → $out"
