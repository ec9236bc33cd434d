#!/usr/bin/env python3
"""Which of Linnet's functions in a linked release binary still reach the standard
library's Unicode tables, from its disassembly: a reverse call graph from the table
lookups (`_swift_stdlib_getNormData`…, `_swift_stdlib_getGraphemeBreakProperty`…) up to
the first functions that are not the standard library's own.

Why: String `==`, `<`, hashing and Character matching link Unicode normalisation (its
code and tables, ~40 KB of the arm64 binary); Character stepping links grapheme
breaking. Linnet compares protocol text as bytes (Sources/Wire/Text.swift), and one
stray `==` on two Strings brings all of it back (and one `.count` of a String the
grapheme tables). `make size` prints the counts, and `--require-none KIND,…` fails when
any function reaches those tables.

usage: unicode-users.py BINARY [-v] [--require-none normalisation,grapheme]
"""
import collections
import os
import re
import shutil
import subprocess
import sys

ROOTS = {
    "normalisation": re.compile(r"^_swift_stdlib_(getNormData|getDecompositionEntry|getComposition)$"),
    "grapheme": re.compile(r"^_swift_stdlib_(getGraphemeBreakProperty|isExtendedPictographic|isInCB_Consonant)$"),
}


def objdump_for(binary):
    machine = subprocess.run(["readelf", "-h", binary], capture_output=True, text=True, check=True).stdout
    if "AArch64" in machine and shutil.which("aarch64-linux-gnu-objdump"):
        return "aarch64-linux-gnu-objdump"
    return "objdump"


def call_graph(binary):
    """function → the symbols its instructions name (calls, jumps, address loads)."""
    dis = subprocess.run([objdump_for(binary), "-d", "--no-show-raw-insn", binary],
                         capture_output=True, text=True, check=True).stdout
    edges = collections.defaultdict(set)
    head = re.compile(r"^[0-9a-f]+ <(.+)>:$")
    ref = re.compile(r"<([^>+]+)(?:\+0x[0-9a-f]+)?>")
    fn = None
    for line in dis.splitlines():
        m = head.match(line)
        if m:
            fn = m.group(1)
            continue
        if fn is None or "\t" not in line:
            continue
        for r in ref.findall(line.split("\t", 1)[1]):
            if r != fn:
                edges[fn].add(r)
    return edges


def standard_library(symbol):
    # `$es…`/`$eS…`: the standard library's code (instantiated for Linnet's types or
    # not); `_swift_…` and `_ZL…`: its C++ runtime helpers and tables. Machine-outlined
    # sequences (`OUTLINED_FUNCTION_n`) are shared by both, and count as neither.
    return symbol.startswith(("$es", "$eS", "_swift", "_ZL", "OUTLINED_FUNCTION"))


def users(edges, root):
    callers = collections.defaultdict(set)
    for f, targets in edges.items():
        for t in targets:
            callers[t].add(f)
    start = {s for s in list(edges) + list(callers) if root.match(s)}
    seen, stack = set(start), list(start)
    while stack:
        for c in callers[stack.pop()]:
            if c not in seen:
                seen.add(c)
                # Stop at Linnet's own functions: those are the ones to change.
                if standard_library(c):
                    stack.append(c)
    return sorted(s for s in seen if not standard_library(s))


def main():
    args = sys.argv[1:]
    verbose = "-v" in args
    require = set()
    if "--require-none" in args:
        value = args.pop(args.index("--require-none") + 1)
        require = set(value.split(","))
        unknown = require - set(ROOTS)
        if unknown:
            sys.exit(f"unicode-users: unknown kind {', '.join(sorted(unknown))} (normalisation, grapheme)")
    binary = [a for a in args if not a.startswith("-")][0]
    edges = call_graph(binary)
    if not any(f.startswith("$e") for f in edges):
        sys.exit(f"unicode-users: {binary} has no function symbols (stripped?): give the unstripped binary")
    failed = False
    for name, root in ROOTS.items():
        found = users(edges, root)
        print(f"BENCH unicode_{name}_users {len(found)} functions")
        if verbose or (name in require and found):
            demangle = shutil.which("swift-demangle") or os.path.join(
                os.path.dirname(os.path.realpath(shutil.which("swiftc") or "/opt/swift/usr/bin/swiftc")), "swift-demangle")
            text = subprocess.run([demangle, "--simplified"], input="\n".join(found),
                                  capture_output=True, text=True).stdout
            for line in text.splitlines():
                print("  " + line[:200])
        if name in require and found:
            failed = True
            print(f"unicode-users: the functions above reach Unicode {name}; compare and count their text "
                  "as bytes (Sources/Wire/Text.swift)", file=sys.stderr)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
