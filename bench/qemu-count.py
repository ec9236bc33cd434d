#!/usr/bin/env python3
"""Instructions an arm64 linnet-bench executes inside its `measured…` functions, counted
under qemu-user: the arm64 counterpart of callgrind's --toggle-collect='*measured*'
(bench/audio.sh), so the hook figures can be given for the boards' own instruction set.

usage: bench/qemu-count.py <arm64 linnet-bench> <kernel> <frames>   → one integer

How: qemu logs every translated block's instructions (in_asm) and every execution of a
block (exec; nochain so that none is skipped), both only for the executable's .text
(-dfilter). A block's instructions are counted each time it runs while a `measured…`
call is open: from the function's entry to the instruction after the `bl` that called
it. Checked against -singlestep (one instruction a block) on the same run: equal.
Not counted: code outside the executable (glibc's memcpy, memset, libm), which
callgrind on x86 does count; libopus and speexdsp are linked in statically.
"""
import os
import re
import subprocess
import sys

binary, kernel, frames = sys.argv[1], sys.argv[2], sys.argv[3]
cross = "aarch64-linux-gnu-"

text_start = text_size = None
for line in subprocess.run([cross + "readelf", "-SW", binary], capture_output=True, text=True, check=True).stdout.splitlines():
    m = re.search(r"\]\s+\.text\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", line)
    if m:
        text_start, text_size = int(m.group(1), 16), int(m.group(2), 16)
if text_start is None:
    sys.exit(f"qemu-count.py: no .text in {binary}")

# Entries of the measured functions, and the return address of every call to one.
entries, returns, start_symbol = set(), set(), None
dis = subprocess.run([cross + "objdump", "-d", "--no-show-raw-insn", binary], capture_output=True, text=True, check=True).stdout
for line in dis.splitlines():
    m = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
    if m:
        if "LinnetBench" in m.group(2) and "measured" in m.group(2):
            entries.add(int(m.group(1), 16))
        if m.group(2) == "_start":
            start_symbol = int(m.group(1), 16)
        continue
    m = re.match(r"^\s*([0-9a-f]+):\s+bl\s+[0-9a-f]+ <(.*)>", line)
    if m and "LinnetBench" in m.group(2) and "measured" in m.group(2):
        returns.add(int(m.group(1), 16) + 4)
if not entries or not returns or start_symbol is None:
    sys.exit("qemu-count.py: no measured functions or calls to them")

# qemu-user loads a position-independent executable at a fixed base (0x5500000000 for
# 64-bit guests), needed for the filter; the first block it runs there is _start, which
# checks it.
base = 0x5500000000
first = True
read_fd, write_fd = os.pipe()
qemu = subprocess.Popen(
    ["qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu", "-d", "nochain,exec,in_asm",
     "-dfilter", f"{base + text_start:#x}+{text_size:#x}", "-D", f"/dev/fd/{write_fd}",
     binary, kernel, frames],
    pass_fds=(write_fd,), stdout=subprocess.DEVNULL)
os.close(write_fd)

sizes = {}       # block start → instructions in it
pending = None   # the block being listed by in_asm: [start, count]
inside = False
count = 0
with os.fdopen(read_fd) as log:
    for line in log:
        if line.startswith("IN:"):
            pending = None
        elif line.startswith("0x"):
            if pending is None:
                pending = [int(line[2:line.index(":")], 16), 0]
            pending[1] += 1
        elif line.startswith("Trace"):
            if pending is not None:
                sizes[pending[0]] = pending[1]
                pending = None
            pc = int(re.search(r"\[[0-9a-f]+/([0-9a-f]+)/", line).group(1), 16)
            if first and pc - base != start_symbol:
                sys.exit(f"qemu-count.py: _start ran at {pc:#x}, not at {base + start_symbol:#x}")
            first = False
            offset = pc - base
            if offset in entries:
                inside = True
            elif offset in returns:
                inside = False
            if inside:
                count += sizes[pc]
if qemu.wait() != 0:
    sys.exit(f"qemu-count.py: {binary} {kernel} {frames} exited with {qemu.returncode}")
print(count)
