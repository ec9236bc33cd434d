# Sourced by scripts/build-mbedtls.sh and scripts/build-libsrtp.sh: CMake settings that
# compile a C library with the Swift toolchain's clang into LLVM bitcode (-flto), so
# that the release link (scripts/embedded-build.sh) optimises it together with the Swift
# modules, with the same LLVM:
# - at -Oz, and on arm64 through the machine outliner that already runs over the Swift
#   code: repeated instruction sequences in the C code, and between C and Swift, become
#   one outlined function each;
# - the library's functions that Linnet never reaches go before code generation.
# For the same triple as the Swift bitcode (lld warns when LTO merges modules of
# different triples), the arm64 library is compiled for aarch64-none-none-elf with the
# Linux defines and the cross glibc headers that the Swift build gives Clang's importer.
# Against the same libraries built by gcc -Os it keeps the arm64 binary about 35 KB
# smaller (`make size` shows what remains under their names; the rest is inlined into
# Swift callers or outlined), and a call's instructions outside Opus the same
# (bench/call-instructions.sh).
# -flto is in the MinSizeRel flags only: CMake's configure checks (the compiler's
# identification, TestBigEndian) read strings from objects they compile, which must
# then be machine code.
# Sets, for $arch (host or arm64): lto_flags (CMAKE_C_FLAGS), lto_cmake (CMake arguments).
toolchain_bin=$(cd "$(dirname "$(command -v swiftc)")" && pwd)
lto_flags="-ffunction-sections -fdata-sections -fno-asynchronous-unwind-tables -fno-unwind-tables"
lto_cmake=(-DCMAKE_C_COMPILER="$toolchain_bin/clang" -DCMAKE_AR="$toolchain_bin/llvm-ar"
           -DCMAKE_RANLIB="$toolchain_bin/llvm-ranlib" -DCMAKE_C_FLAGS_MINSIZEREL="-Oz -DNDEBUG -flto"
           -DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY)
if [ "$arch" = arm64 ]; then
  lto_flags+=" -isystem /usr/aarch64-linux-gnu/include -D__linux__ -D__unix__ -D__gnu_linux__"
  lto_cmake+=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64
              -DCMAKE_C_COMPILER_TARGET=aarch64-none-none-elf)
else
  lto_cmake+=(-DCMAKE_C_COMPILER_TARGET=x86_64-unknown-linux-gnu)
fi
