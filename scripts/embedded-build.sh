#!/usr/bin/env bash
# The Embedded Swift release build: every product module of Package.swift compiled with
# `-enable-experimental-feature Embedded -wmo -Osize` (and the inlining setting of
# scripts/osize-flags.sh), one module at a time in dependency order, then linked by gcc
# (with the toolchain's lld) against glibc and the static C libraries.
# The result needs no Swift runtime: its only dynamic dependencies are libc, libm,
# libasound and the loader.
#
# usage: scripts/embedded-build.sh host|arm64 [extra swiftc flags…]
#   → build/<arch>/linnet (unstripped) and build/<arch>/linnet.stripped
# BUILD_DIR overrides build/ (helpers building side by side).
set -euo pipefail
arch=${1:?usage: embedded-build.sh host|arm64 [swiftc flags]}
shift
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=${BUILD_DIR:-$top/build}
out=$build/$arch
srtp=$top/build/third_party/$arch

case "$arch" in
  host)
    target=x86_64-unknown-linux-gnu
    cc=gcc; strip=strip; objcopy=objcopy
    libdir=/usr/lib/x86_64-linux-gnu
    ldflags=()
    cflags=()
    ;;
  arm64)
    # The toolchain ships an Embedded stdlib for aarch64-none-none-elf; glibc and the
    # Debian multiarch libraries provide the Linux side, so clang is told it is Linux.
    target=aarch64-none-none-elf
    cc=aarch64-linux-gnu-gcc; strip=aarch64-linux-gnu-strip; objcopy=aarch64-linux-gnu-objcopy
    libdir=/usr/lib/aarch64-linux-gnu
    # Segments aligned to 16 KiB, not ld's aarch64 default of 64 KiB: the file then
    # carries at most 16 KiB of padding between text and data (not up to 64), and
    # the binary still loads on kernels with 4 KiB and 16 KiB pages (Raspberry Pi OS
    # on the Pi 5 uses 16 KiB); a 64 KiB-page kernel would refuse it.
    ldflags=(-Wl,-z,max-page-size=16384 -Wl,-z,common-page-size=4096)
    cflags=(-Xcc -isystem -Xcc /usr/aarch64-linux-gnu/include -Xcc -isystem -Xcc /usr/include
            -Xcc -D__linux__ -Xcc -D__unix__ -Xcc -D__aarch64__ -Xcc -D__gnu_linux__)
    ;;
  *) echo "unknown architecture '$arch' (host or arm64)" >&2; exit 64 ;;
esac

# libsrtp and mbedtls from Debian's source packages (mbedtls configured for Linnet:
# scripts/mbedtls/config.h); their headers come first on the include path.
scripts/build-libsrtp.sh "$arch"
# Debian's libgpiod.a (and on x86 its libopus.a) without their unwind tables
# (.eh_frame, ~20 kB in the binary), as mbedtls and libsrtp are built: nothing unwinds
# through these C frames (no C++, no pthread_cancel; Swift traps abort without
# unwinding, and the Swift objects carry no unwind tables either). What a crash loses:
# gdb's backtrace from a core dump relies on prologue analysis inside these libraries
# and may stop early there. libopus for arm64 is built from Debian's source package,
# for what Linnet uses (scripts/build-opus.sh).
copied=(libgpiod)
if [ "$arch" = arm64 ]; then scripts/build-opus.sh; else copied+=(libopus); fi
for lib in "${copied[@]}"; do
  if [ ! "$srtp/lib/$lib.a" -nt "$libdir/$lib.a" ]; then
    "$objcopy" -R .eh_frame -R .rela.eh_frame "$libdir/$lib.a" "$srtp/lib/$lib.a"
  fi
done
scripts/build-speexdsp.sh "$arch"
speex=$top/build/third_party/speexdsp/$arch

swiftc=$(command -v swiftc)
. scripts/osize-flags.sh
toolchain=$(cd "$(dirname "$swiftc")/.." && pwd)
clang=$toolchain/bin/clang
embedded_lib=$toolchain/lib/swift/embedded/$target

# Product modules in dependency order, read from Package.swift itself so the two
# builds cannot drift apart.
mapfile -t modules < <(swift package dump-package | python3 -c '
import json, sys
pkg = json.load(sys.stdin)
targets = {t["name"]: t for t in pkg["targets"] if t["type"] in ("regular", "executable") and not (t.get("path") or "").startswith("Tests/")}
def deps(t):
    out = []
    for d in t["dependencies"]:
        for kind in ("byName", "target"):
            if kind in d:
                out.append(d[kind][0])
    return [d for d in out if d in targets]
order, seen = [], set()
def visit(n):
    if n in seen: return
    seen.add(n)
    for d in deps(targets[n]): visit(d)
    order.append(n)
for n in sorted(targets): visit(n)
for n in order: print(n, targets[n]["type"])
')

includes=()
for c in Sources/C*/module.modulemap; do includes+=(-I "$(dirname "$c")"); done

# Library targets compiled into the executable itself here. Runtime is a module of its
# own for SwiftPM (the tests import it; the boundary is checked in every debug build),
# but Embedded Swift makes every function's body available to its clients, and each
# client object keeps its own local copies of what it inlines (merged thunks, static
# arrays, strings): as a separate object, the I/O shell would cost about 32 KB that it
# does not cost inside the executable. Its sources join the executable's; an empty module of
# its name satisfies `import Runtime`.
merged=(Runtime)
is_merged() { local m; for m in "${merged[@]}"; do [ "$m" = "$1" ] && return 0; done; return 1; }

mkdir -p "$out/modules" "$out/obj"
rm -f "$out"/obj/*.o "$out"/obj/*.bc "$out"/obj/*.ll
for line in "${modules[@]}"; do
  name=${line% *}; kind=${line#* }
  if is_merged "$name"; then
    : > "$out/modules/$name-empty.swift"
    "$swiftc" -target "$target" -enable-experimental-feature Embedded -wmo -parse-as-library -module-name "$name" -swift-version 6 \
      -emit-module -emit-module-path "$out/modules/$name.swiftmodule" "$out/modules/$name-empty.swift"
    continue
  fi
  mapfile -t files < <(find "Sources/$name" -name '*.swift' | sort)
  if [ "$kind" = executable ]; then
    for m in "${merged[@]}"; do mapfile -t -O "${#files[@]}" files < <(find "Sources/$m" -name '*.swift' | sort); done
  fi
  # swiftc emits optimised LLVM IR (one module at a time); the toolchain's
  # clang (the same LLVM) turns each into bitcode, and below generates one object from
  # all of them. See "One object" below for why.
  emit=(-emit-module -emit-module-path "$out/modules/$name.swiftmodule")
  [ "$kind" = executable ] && emit=()
  "$swiftc" -target "$target" -enable-experimental-feature Embedded -wmo "${osize_flags[@]}" \
    -parse-as-library -module-name "$name" -swift-version 6 -warnings-as-errors \
    -Xfrontend -function-sections \
    -I "$out/modules" "${includes[@]}" -Xcc -I -Xcc "$srtp/include" -Xcc -I -Xcc "$speex/include" "${cflags[@]}" "$@" \
    "${emit[@]}" -emit-ir "${files[@]}" -o "$out/obj/$name.ll"
  "$clang" -target "$target" -Xclang -disable-llvm-passes -Wno-override-module \
    -c -emit-llvm "$out/obj/$name.ll" -o "$out/obj/$name.bc"
  rm -f "$out/obj/$name.ll"
done

# Link-time optimisation: lld takes every module's bitcode, sees the whole program and
# generates it as one (full LTO), before linking it with the C libraries. The code is
# what swiftc optimised module by module; what LTO adds:
# - lld knows the executable exports nothing, so every Swift symbol becomes internal:
#   unused functions, witness tables and metadata go, functions called once are
#   inlined into their caller, and constants are propagated across modules. (One
#   object generated from the linked bitcode with no LLVM pass run again would keep
#   every public symbol of a module external, and only --gc-sections would remove
#   unused code: about 130 KB more, arm64 stripped.)
#   (The functions keep swiftc's -Osize attributes, minsize and
#   optsize, so the second pipeline optimises them for size; the audio kernels marked
#   @_optimize(speed) carry neither.)
# - lld generates one section per function and per global, as clang did with
#   -ffunction-sections -fdata-sections, so --gc-sections and --icf still apply;
# - on arm64 the machine outliner runs on the minsize functions, a second time over its
#   own output (-machine-outliner-reruns=2; more runs found nothing more). Outlined
#   code is a call away (bl/ret).
# scripts/size-report.py attributes the LTO object's sections to modules by their
# mangled names.
lto=(-Wl,-mllvm,-machine-outliner-reruns=2)

# Static C libraries first (libsrtp before mbedtls, whose AES and HMAC it uses; speexdsp
# is the tuned build of scripts/build-speexdsp.sh, the same as the full build links),
# ALSA dynamically: its plugins are loaded at run time and Debian ships no libasound.a.
#
# Linked by the toolchain's lld rather than GNU ld, for what lld does here that GNU ld
# 2.40 does not (it is also a little smaller by itself):
# - -z pack-relative-relocs: the ~1,900 relative relocations of a PIE (Swift metadata and
#   every pointer in data) as a DT_RELR bitmap, about 0.5 KB instead of about 45 KB of
#   RELA entries. glibc 2.36 (Debian 12, Raspberry Pi OS bookworm) applies DT_RELR;
#   lld records the requirement as the GLIBC_ABI_DT_RELR version, so an older glibc
#   refuses the binary at load with a clear message rather than running it unrelocated.
#   GNU ld 2.40 packs relocations only for x86.
# - --icf=safe: identical functions folded into one (Swift specialisations that compile
#   to the same code), except those whose address is taken, as clang's address-
#   significance table records; the C libraries are built by gcc, which writes no such
#   table, so none of their functions are folded. What a crash report
#   loses: a folded function's frames carry the name of the copy that was kept.
# - -z now: every symbol bound at start, so the whole GOT is read-only after relocation
#   (full RELRO); Linnet imports about 150 functions, bound once.
# lld also puts read-only data in a segment of its own, not executable.
# gcc finds ld.lld through -B, in a directory holding only that link, so no other tool
# of the Swift toolchain's bin shadows the cross binutils.
mkdir -p "$out/lld"
ln -sf "$toolchain/bin/ld.lld" "$out/lld/ld.lld"
# -static-libgcc: code generation after LTO can call libgcc's helpers that no input
# asked for before it (mbedtls' bignum division by a 128-bit integer, __udivti3); gcc's
# default link would then take them from libgcc_s.so, a dependency the release binary
# must not have (scripts/check-needed.sh). They come from libgcc.a instead.
"$cc" -B"$out/lld" -fuse-ld=lld -static-libgcc -Wl,-z,pack-relative-relocs -Wl,--icf=safe -Wl,-z,now \
  "${lto[@]}" -o "$out/linnet" "$out"/obj/*.bc \
  "$srtp/lib/libsrtp2.a" "$speex/lib/liblinnet-speexdsp.a" "$srtp/lib/libopus.a" "$srtp/lib/libgpiod.a" \
  "$srtp/lib/libmbedtls.a" "$srtp/lib/libmbedx509.a" "$srtp/lib/libmbedcrypto.a" \
  -lasound -lm -L"$embedded_lib" -lswiftUnicodeDataTables \
  -Wl,--gc-sections -Wl,--as-needed "${ldflags[@]}" -Wl,-Map="$out/linnet.map"
rm -f "$out"/obj/*.bc
"$strip" -o "$out/linnet.stripped" "$out/linnet"
echo "built $out/linnet ($(stat -c %s "$out/linnet.stripped") bytes stripped)"
