#!/usr/bin/env python3
"""What each input adds to the linked binary, from lld's map file: the sizes of the
allocated sections kept after --gc-sections, summed by archive (C libraries) or Swift
module (from the mangled name of each section's symbol; lld's LTO generates every
module's bitcode as one object, named after the output with .lto.o).
Usage: size-report.py build/arm64/linnet.map [LIB.a …]
The C libraries compiled to bitcode (scripts/clang-lto.sh) are generated into that same
object; each LIB.a named is read with llvm-nm, and a section of the object whose symbol
one of them defines counts for it."""
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict

totals = defaultdict(int)

# Symbol → library, for the bitcode archives named after the map.
c_symbol = {}
# The Swift toolchain's llvm-nm: it reads the bitcode its clang wrote (an llvm-nm of
# Debian's older LLVM on the PATH does not).
swiftc = shutil.which("swiftc") or "/opt/swift/usr/bin/swiftc"
nm = os.path.join(os.path.dirname(os.path.realpath(swiftc)), "llvm-nm")
for archive in sys.argv[2:]:
    lib = re.sub(r"\.a$", "", os.path.basename(archive))
    listing = subprocess.run([nm, "--defined-only", "--format=just-symbols", archive],
                             capture_output=True, text=True, check=True).stdout
    for symbol in listing.split():
        if not symbol.endswith(":"):
            c_symbol.setdefault(symbol, lib)


def swift_module(section):
    """The module a Swift section belongs to, from its symbol's mangled name: lld's LTO
    generates every module into one object (embedded-build.sh), with one section per
    function and per global. `$e<len><Module>…` names the module of the declaration (a
    specialisation counts where its generic is declared); `$es`/`$eS…` is the standard
    library's code instantiated for Linnet's types. Sections without a Swift name
    (machine-outlined code, merged string literals) are "shared"."""
    m = re.search(r"\$e(s|S|\d+)", section)
    if not m:
        return "(shared: outlined code, string literals)"
    if not m.group(1)[0].isdigit():
        return "(stdlib instances)"
    start = m.end()
    return section[start:start + int(m.group(1))]
# lld's map (-Map): columns VMA, LMA, Size, Align (hex, hex, hex, decimal), then the
# output section at no indent, each input section indented 8 ("file:(section)", or
# "archive(member):(section)"), each symbol indented 16.
line_re = re.compile(r"^\s*[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+ (\s*)(\S.*)$")
with open(sys.argv[1]) as f:
    for line in f:
        m = line_re.match(line)
        if not m or len(m.group(2)) != 8:
            continue
        size = int(m.group(1), 16)
        i = m.group(3).rfind(":(")
        if size == 0 or i < 0:
            continue
        origin, name = m.group(3)[:i], m.group(3)[i + 2:-1]
        if not re.match(r"\.(text|rodata|data|bss|init_array|fini_array|eh_frame|gcc_except)", name):
            continue
        a = re.search(r"lib([\w+-]+)\.a\(", origin)
        if a:
            key = "lib" + a.group(1)
        elif origin.endswith(".lto.o"):
            # the Swift modules' bitcode and the C libraries compiled to bitcode,
            # generated as one object by lld's LTO (a section per function or global,
            # named after it: .text.<symbol>, .rodata.<symbol>…)
            symbol = re.sub(r"^\.(text|rodata|data\.rel\.ro|data|bss)\.", "", name)
            key = c_symbol[symbol] if symbol in c_symbol else "swift:" + swift_module(name)
        elif origin == "<internal>":
            # lld merges every input's mergeable constants and strings into one section
            key = "merged constants and strings (all inputs)"
        else:
            key = "other (crt, libc stubs)"
        if ".eh_frame" in name:
            key = "unwind tables (.eh_frame)"
        totals[key] += size
for key, size in sorted(totals.items(), key=lambda kv: -kv[1]):
    print(f"SIZE {key} {size} bytes")
