#!/usr/bin/env bash
# Builds mbedtls 2.28 from Debian's source package as static libraries configured for
# what Linnet uses (scripts/mbedtls/config.h says what is in and out), for one
# architecture: the release binary's TLS, DTLS and X.509 code, and the crypto libsrtp
# is built on (scripts/build-libsrtp.sh).
#
# Why: Debian's libmbedtls.a enables every cipher, curve, key exchange, protocol
# version, the debug module and the self-tests; with --gc-sections the release binary
# still kept ~500 kB of it, mostly reached through tables (cipher and suite lists, the
# md and pk dispatch) that the linker cannot prune. Compiled to bitcode at -Oz for the
# release link's LTO (scripts/clang-lto.sh), without asynchronous unwind tables
# (nothing unwinds through C frames here: Swift traps do not unwind and there is no
# C++), and with function sections.
#
# usage: scripts/build-mbedtls.sh host|arm64   → build/third_party/<arch>/{include,lib}
# The installed include/mbedtls/config.h is scripts/mbedtls/config.h, so every
# compiler that reads these headers (swiftc's Clang importer, libsrtp) sees the same
# structure layouts as the library.
set -euo pipefail
arch=${1:?usage: build-mbedtls.sh host|arm64}
top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/third_party/$arch
config=$top/scripts/mbedtls/config.h
stamp=$out/lib/libmbedcrypto.a
# Rebuilt when the config or this script changed since the last build.
if [ -f "$stamp" ] && [ "$stamp" -nt "$config" ] && [ "$stamp" -nt "$0" ] && [ "$stamp" -nt "$top/scripts/clang-lto.sh" ]; then exit 0; fi
src=$top/build/third_party/src
mkdir -p "$src"
version=2.28.3
# The source tree is shared by both architectures, whose builds may run side by side
# (.ci/run): one unpacks it while the other waits. The config is replaced only when it
# differs, and by a rename, so a build compiling from the tree never reads it half
# written.
exec 9>"$src/.lock"; flock 9
if [ ! -d "$src/mbedtls-$version" ]; then
  (cd "$src" && apt-get source --download-only "mbedtls=$version-1" >/dev/null 2>&1 || apt-get source --download-only mbedtls >/dev/null)
  (cd "$src" && dpkg-source -x --skip-patches mbedtls_"$version"*.dsc "mbedtls-$version" >/dev/null 2>&1)
fi
target=$src/mbedtls-$version/include/mbedtls/config.h
if ! cmp -s "$config" "$target"; then
  cp "$config" "$target.new" && mv -f "$target.new" "$target"
fi
flock -u 9
bld=$top/build/third_party/build-mbedtls-$arch
rm -rf "$bld"; mkdir -p "$bld"
# Bitcode for the release link's LTO, by the toolchain's clang at -Oz (clang-lto.sh).
. "$top/scripts/clang-lto.sh"
cmake -S "$src/mbedtls-$version" -B "$bld" -DCMAKE_BUILD_TYPE=MinSizeRel \
  -DENABLE_TESTING=OFF -DENABLE_PROGRAMS=OFF -DUSE_SHARED_MBEDTLS_LIBRARY=OFF \
  -DUSE_STATIC_MBEDTLS_LIBRARY=ON -DMBEDTLS_FATAL_WARNINGS=OFF -DLINK_WITH_PTHREAD=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_C_FLAGS="$lto_flags" \
  -DCMAKE_INSTALL_PREFIX="$out" "${lto_cmake[@]}" >"$bld.log" 2>&1 || { cat "$bld.log"; exit 1; }
cmake --build "$bld" -j"$(nproc)" >>"$bld.log" 2>&1 || { tail -40 "$bld.log"; exit 1; }
rm -rf "$out/include/mbedtls"
cmake --install "$bld" >>"$bld.log" 2>&1
echo "mbedtls $version (Linnet's config) for $arch → $out"
