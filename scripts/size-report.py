#!/usr/bin/env python3
"""What each input adds to the linked binary, from the GNU ld map file: the sizes of the
allocated sections kept after --gc-sections, summed by archive (C libraries) or Swift
module (from the mangled name of each section's symbol). Usage: size-report.py build/arm64/linnet.map"""
import re
import sys
from collections import defaultdict

totals = defaultdict(int)


def swift_module(section):
    """The module a Swift section belongs to, from its symbol's mangled name: the build
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
section = None
pending = None
with open(sys.argv[1]) as f:
    in_map = False
    for line in f:
        if line.startswith("Linker script and memory map"):
            in_map = True
            continue
        if not in_map:
            continue
        m = re.match(r"^ (\.[\w.$-]+)\s*$", line)
        if m:  # a long input section name: the address, size and file are on the next line
            pending = m.group(1)
            continue
        m = re.match(r"^ (\.[\w.$-]+)?\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S+)", line)
        if m:
            name = m.group(1) or pending
            pending = None
            if not name or not re.match(r"\.(text|rodata|data|bss|init_array|fini_array|eh_frame|gcc_except)", name):
                continue
            size = int(m.group(3), 16)
            origin = m.group(4)
            if size == 0:
                continue
            a = re.search(r"lib([\w+-]+)\.a\(", origin)
            if a:
                key = "lib" + a.group(1)
            elif origin.endswith(".o") and "/obj/" in origin:
                key = "swift:" + swift_module(name)
            else:
                key = "other (crt, libc stubs)"
            if ".eh_frame" in name:
                key = "unwind tables (.eh_frame)"
            totals[key] += size
for key, size in sorted(totals.items(), key=lambda kv: -kv[1]):
    print(f"SIZE {key} {size} bytes")
