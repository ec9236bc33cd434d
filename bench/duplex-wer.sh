#!/usr/bin/env bash
# The duplex table: "talk over the assistant and be understood", measured on a whole
# `linnet run` in real time (Tests/Speech/run_duplex.py; Tests/Speech/README.md says
# what each figure means). Three rooms (no echo, handset, speaker board) at 0 % and
# 10 % loss, ten requests each; BENCH duplex_wer_<room>_<loss>_<up|down>[_<variant>]
# lines, the clean baseline, barge-in times and the truncate check.
#   bench/duplex-wer.sh [BINARY] [run_duplex.py options, e.g. --variants default,full,aec]
# BINARY defaults to the debug build (.build/debug/linnet). About a minute a cell.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=$top/.build/debug/linnet
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then bin=$1; shift; fi
[ -x "$bin" ] || { echo "bench/duplex-wer.sh: no binary at $bin (make build)" >&2; exit 69; }
speech=$("$top/Tests/Speech/setup.sh" | tail -n 1)
interop=$("$top/Tests/Interop/setup.sh" | tail -n 1)
exec "$speech" "$top/Tests/Speech/run_duplex.py" --linnet "$bin" --interop-python "$interop" "$@"
