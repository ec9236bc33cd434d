#!/usr/bin/env bash
# Network figures of the release binary on loopback, one BENCH line each:
#   connect_ms          offer POST → first SRTP audio packet received (median of 20 calls,
#                       one interface: loopback); connect_ms_<peer> the same against
#                       `linnet answer`, aiortc and pion (Tests/Interop) where installed
#   demo_connect_ms     the same inside `linnet demo` (median of 9)
#   call_cpu_ms_per_s   CPU (user+sys) per call-second of a 20 s echo call, Opus included
#   call_rss_kb         peak RSS of that call
#   call_allocations_per_s  malloc-family calls per call-second (bench/alloc-count.c)
#   call_cpu_ratio_vs_pion  CPU of a 20 s echo call against a pion answerer over that of
#                       pion's own client making the same call (one run, side by side;
#                       also call_pion_cpu_s_*, call_pion_rss_kb_*, and each one's user
#                       and kernel parts, call_pion_user_s_* / call_pion_sys_s_*)
#   call_cpu_ratio_vs_pion_c0  the same with Linnet's encoder at complexity 0, its
#                       cheapest: how far the rest of a call is from that goal whatever
#                       the Opus setting (the pion client encodes nothing)
#   dc_message_rtt_ms   one small data-channel message to the echoing answerer and back
#   dc_throughput_kbps  8 MB of 64 KB messages echoed (each byte crosses loopback twice)
#   reconnect_ms        answerer killed and started again: its READY → the agent connected
#                       again with audio switched to the new session (median of 5)
#   demo_rss_kb         peak RSS of `linnet demo` (agent and built-in answerer, 5 s call)
# The answerer is `linnet answer` (the same binary). Usage: bench/network.sh [BINARY]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$top/build/host/linnet}
[ -x "$bin" ] || { echo "bench/network.sh: build the release binary first (make release)" >&2; exit 69; }
. "$top/bench/lib.sh"
work=$(mktemp -d)
trap 'bench_stop; rm -rf "$work"' EXIT

bench_tone "$work/tone.wav" 2

bench_start "$work/answer.out" "$bin" answer --listen 127.0.0.1:0 --mode echo --log-level warn
url=http://127.0.0.1:$bench_port/whip

field() { python3 -c "import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l)
    if d.get('type')=='stats' and sys.argv[2] in d: print(d[sys.argv[2]])" "$@"; }

# Median connect_ms of N one-second calls to a WHIP URL (one interface: loopback).
connect_median() {
  local url=$1 n=$2 connects=() i
  for i in $(seq 1 "$n"); do
    rm -f "$work/ev.jsonl"
    "$bin" run --whip "$url" --input "$work/tone.wav" --playback none --seconds 1 --events "$work/ev.jsonl" --log-level error
    connects+=("$(field "$work/ev.jsonl" connect_ms | tail -n 1)")
  done
  printf '%s\n' "${connects[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
}

echo "BENCH connect_ms $(connect_median "$url" 20) ms"
echo "BENCH connect_ms_linnet $(connect_median "$url" 20) ms"
# The same against independent stacks, where they are installed (Tests/Interop).
if py=$("$top/Tests/Interop/setup.sh" 2>/dev/null | tail -n 1) && [ -x "$py" ]; then
  bench_start "$work/aiortc.out" "$py" -u "$top/Tests/Interop/peer.py" --listen 127.0.0.1:0 --mode echo --no-peer-channel
  echo "BENCH connect_ms_aiortc $(connect_median "http://127.0.0.1:$bench_port/whip" 20) ms"
fi
if [ -x "$top/Tests/Interop/pion/build.sh" ] && pion=$("$top/Tests/Interop/pion/build.sh" 2>/dev/null | tail -n 1) && [ -x "$pion" ]; then
  bench_start "$work/pion.out" "$pion" answer --listen 127.0.0.1:0 --mode echo
  echo "BENCH connect_ms_pion $(connect_median "http://127.0.0.1:$bench_port/whip" 20) ms"
fi

/usr/bin/time -f "%U %S %M" -o "$work/time" "$bin" run --whip "$url" --input "$work/tone.wav" --loop-input --playback none --seconds 20 --log-level error
read -r user sys rss < "$work/time"
python3 -c "print('BENCH call_cpu_ms_per_s %.1f ms' % ((float('$user') + float('$sys')) * 1000 / 20))"
echo "BENCH call_rss_kb $rss kB"

# The same 20 s echo call side by side with a pion client (Tests/Interop/pion's
# `offer`, which sends pre-encoded Ogg/Opus: no Opus work of its own), each against its
# own pion echo answerer, measured in one run so the ratio does not depend on the
# machine's speed or load of the day.
if [ -n "${pion:-}" ] && [ -x "$pion" ] && command -v opusenc >/dev/null; then
  bench_tone "$work/long.wav" 22
  opusenc --quiet --bitrate 32 --framesize 20 --max-delay 20 "$work/long.wav" "$work/long.opus"
  bench_start "$work/pion-l.out" "$pion" answer --listen 127.0.0.1:0 --mode echo; port_l=$bench_port
  bench_start "$work/pion-p.out" "$pion" answer --listen 127.0.0.1:0 --mode echo; port_p=$bench_port
  # (Linnet loops the 2 s tone: --input reads its file into memory, and a 22 s one
  # would add 2 MB to its RSS that a microphone never costs.)
  # A 20 s Linnet call to its pion answerer, timed into $1; the rest are extra options.
  linnet_call() {
    local out=$1; shift
    /usr/bin/time -f "%U %S %M" -o "$out" "$bin" run --whip "http://127.0.0.1:$port_l/whip" \
      --input "$work/tone.wav" --loop-input --playback none --seconds 20 --log-level error "$@"
  }
  linnet_call "$work/time-l"
  /usr/bin/time -f "%U %S %M" -o "$work/time-p" "$pion" offer --url "http://127.0.0.1:$port_p/whip" \
    --ogg "$work/long.opus" --seconds 20 > /dev/null 2>&1 || true
  linnet_call "$work/time-l0" --complexity 0
  read -r lu ls lrss < "$work/time-l"
  read -r pu ps prss < "$work/time-p"
  read -r l0u l0s l0rss < "$work/time-l0"
  python3 -c "
lu, ls, pu, ps, l0u, l0s = $lu, $ls, $pu, $ps, $l0u, $l0s
print('BENCH call_pion_cpu_s_linnet %.2f s' % (lu + ls))
print('BENCH call_pion_user_s_linnet %.2f s' % lu)
print('BENCH call_pion_sys_s_linnet %.2f s' % ls)
print('BENCH call_pion_cpu_s_pion %.2f s' % (pu + ps))
print('BENCH call_pion_user_s_pion %.2f s' % pu)
print('BENCH call_pion_sys_s_pion %.2f s' % ps)
print('BENCH call_cpu_ratio_vs_pion %.2f x' % ((lu + ls) / max(pu + ps, 0.001)))
print('BENCH call_pion_cpu_s_linnet_c0 %.2f s' % (l0u + l0s))
print('BENCH call_cpu_ratio_vs_pion_c0 %.2f x' % ((l0u + l0s) / max(pu + ps, 0.001)))"
  echo "BENCH call_pion_rss_kb_linnet $lrss kB"
  echo "BENCH call_pion_rss_kb_pion $prss kB"
fi

# Allocations per call-second on the loop (the audio threads allocate nothing: the
# capture path is counted by bench/audio.sh): the malloc family counted in the whole
# process by bench/alloc-count.c (LD_PRELOAD), a 4 s and a 12 s call, the difference
# over 8 s, so start-up, the handshake and teardown cancel.
if gcc -O2 -shared -fPIC -o "$work/alloc-count.so" "$top/bench/alloc-count.c" 2>/dev/null; then
  for s in 4 12; do
    ALLOC_COUNT_FILE="$work/alloc$s" LD_PRELOAD="$work/alloc-count.so" "$bin" run --whip "$url" \
      --input "$work/tone.wav" --loop-input --playback none --seconds $s --log-level error
  done
  echo "BENCH call_allocations_per_s $(( ($(cat "$work/alloc12") - $(cat "$work/alloc4")) / 8 )) count"
fi

printf '{"type":"ping"}\n' > "$work/one.txt"
"$bin" run --whip "$url" --capture none --playback none --seconds 1 --send "$work/one.txt" --events "$work/rtt.jsonl" --log-level error
python3 - "$work/rtt.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
opened = next(l["t"] for l in lines if l.get("type") == "channel" and l.get("event") == "open")
echo = next(l["t"] for l in lines if l.get("type") == "message")
print("BENCH dc_message_rtt_ms %.1f ms" % ((echo - opened) * 1000))
PY

python3 -c "print(('m' * 65536 + '\n') * 128, end='')" > "$work/bulk.txt"
"$bin" run --whip "$url" --capture none --playback none --seconds 20 --send "$work/bulk.txt" --events "$work/bulk.jsonl" --log-level error
python3 - "$work/bulk.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
opened = next(l["t"] for l in lines if l.get("type") == "channel" and l.get("event") == "open")
msgs = [l for l in lines if l.get("type") == "message"]
if len(msgs) < 128:
    print("BENCH dc_throughput_kbps 0 kbit/s (only %d of 128 echoes within 20 s)" % len(msgs))
else:
    seconds = msgs[-1]["t"] - opened
    print("BENCH dc_throughput_kbps %.0f kbit/s" % (128 * 65536 * 8 / 1000 / seconds))
PY

python3 "$top/bench/reconnect.py" "$bin" 5

/usr/bin/time -f "%M" -o "$work/demo.time" "$bin" demo --seconds 5 --output "$work/demo.wav" --log-level error > "$work/demo.out"
echo "BENCH demo_rss_kb $(cat "$work/demo.time") kB"
demo_connects=()
for i in $(seq 1 9); do
  "$bin" demo --seconds 1 --output "$work/demo.wav" --log-level error > "$work/demo.out" 2>&1
  demo_connects+=("$(sed -n 's/.*connect \([0-9]*\) ms.*/\1/p' "$work/demo.out" | tail -n 1)")
done
echo "BENCH demo_connect_ms $(printf '%s\n' "${demo_connects[@]}" | sort -n | awk '{a[NR]=$1} END {print a[(NR+1)/2]}') ms"
