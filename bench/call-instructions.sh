#!/usr/bin/env bash
# Instructions per call-second of an echo call, counted by callgrind (a figure that does
# not depend on the machine or its load, unlike call_cpu_ms_per_s), one BENCH line each:
#   call_instructions_per_s          the whole `linnet run` process, every thread
#   call_opus_encode_instructions_per_s   inside opus_encode (complexity 10, the product's)
#   call_opus_decode_instructions_per_s   inside opus_decode (decode, FEC and concealment)
#   call_non_opus_instructions_per_s the rest: loop, timers, SRTP, RTP/RTCP, jitter
#                                    buffer, capture and playback threads, copies, stats
# The client runs under callgrind against `linnet answer --mode echo` (not measured);
# only the steady part of the call counts (from its first SHORT packets sent to the end:
# start-up, signaling and the DTLS handshake are left out). Opus: instructions per
# opus_encode / opus_decode call × 50 (one 20 ms frame each way a second). The rest:
# instructions outside Opus per frame encoded and sent (one RTP packet each) × 50.
# Under valgrind the client runs slower than real time (stale capture frames are
# dropped), so these are per-frame figures, not per-wall-second ones: work done per
# wall-second (timers, the 1 s stats line this run asks for) is slightly mis-weighted.
# usage: bench/call-instructions.sh [BINARY] [SHORT_PACKETS SECONDS]   (default 25 20)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$top/build/host/linnet}
short=${2:-25}
long=${3:-20}
[ -x "$bin" ] || { echo "bench/call-instructions.sh: build the release binary first (make release)" >&2; exit 69; }
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null || {
  echo "bench/call-instructions.sh: valgrind not installed (scripts/setup.sh)" >&2; exit 69; }
. "$top/bench/lib.sh"
work=$(mktemp -d); [ -n "${KEEP:-}" ] && echo "keeping $work" >&2
trap 'bench_stop; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

bench_tone "$work/tone.wav" 2

bench_start "$work/answer.out" "$bin" answer --listen 127.0.0.1:0 --mode echo --log-level warn
port=$bench_port

# One call under callgrind with a stats line a second. Once the call has sent its first
# packets, `callgrind_control --dump` closes a first part (start-up, signaling, the DTLS
# handshake); the part written at exit is the steady call (and its teardown, a DELETE
# and a close alert: small beside it).
s=$long out=$work/cg
valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" run --whip "http://127.0.0.1:$port/whip" \
  --input "$work/tone.wav" --loop-input --playback none --seconds "$s" --stats-seconds 1 \
  --events "$out.jsonl" --log-level error > /dev/null 2>&1 &
vg=$!
sent_now() { python3 -c "import json,sys
n=0
for l in open(sys.argv[1]):
    try: d=json.loads(l)
    except ValueError: continue
    if d.get('type')=='stats' and 'packets_sent' in d: n=d['packets_sent']
print(n)" "$out.jsonl" 2>/dev/null || echo 0; }
p1=0 dumped=0
while kill -0 $vg 2>/dev/null; do
  p1=$(sent_now)
  if [ "$p1" -ge "$short" ]; then callgrind_control --dump=steady $vg > /dev/null 2>&1 && dumped=1; break; fi
  read -r -t 0.1 < /dev/null || true
done
wait $vg || true
[ $dumped = 1 ] || { echo "BENCH call_instructions_per_s 0 instructions (the call never sent $short packets)"; exit 0; }
final=$(ls -t "$out"* | grep -v -E '\.(jsonl|txt)$' | head -n 1)
callgrind_annotate --inclusive=yes --tree=caller --threshold=100 "$final" 2>/dev/null > "$out.txt"
python3 - "$out.txt" <<'PY'
import re, sys
total = 0
cost = {"opus_encode": 0, "opus_decode": 0}
calls = {"opus_encode": 0, "opus_decode": 0}
block = []
for line in open(sys.argv[1]):
    if not line.strip():
        block = []
        continue
    block.append(line)
    m = re.match(r"\s*([\d,]+) .*PROGRAM TOTALS", line)
    if m: total = int(m.group(1).replace(",", ""))
    m = re.match(r"\s*([\d,]+) \([ \d.%]+\)\s+\*\s+\?\?\?:(opus_encode|opus_decode) \[", line)
    if m:
        cost[m.group(2)] = int(m.group(1).replace(",", ""))
        for b in block:
            c = re.search(r"< .*\(([\d,]+)x\)", b)
            if c: calls[m.group(2)] += int(c.group(1).replace(",", ""))
frames = calls["opus_encode"]
if frames < 50 or calls["opus_decode"] == 0:
    print("BENCH call_instructions_per_s 0 instructions (steady part: %d frames sent, %d decodes)"
          % (frames, calls["opus_decode"]))
    sys.exit(0)
# Opus: per call × 50 calls a second (one 20 ms frame each way). Under valgrind the
# process is slower than real time, so the null playback device's pulls (and with them
# the decodes) fall behind; per call, the figure does not care.
enc = cost["opus_encode"] / calls["opus_encode"] * 50
dec = cost["opus_decode"] / calls["opus_decode"] * 50
# The rest, per frame sent × 50 (connected, each encoded frame is one RTP packet sent;
# counted in the part itself, not from the stats lines, whose timing is loose).
rest = (total - cost["opus_encode"] - cost["opus_decode"]) * 50 / frames
print("BENCH call_instructions_per_s %.0f instructions" % (enc + dec + rest))
print("BENCH call_opus_encode_instructions_per_s %.0f instructions" % enc)
print("BENCH call_opus_decode_instructions_per_s %.0f instructions" % dec)
print("BENCH call_non_opus_instructions_per_s %.0f instructions" % rest)
PY
