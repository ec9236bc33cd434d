# Shared by the bench scripts (sourced, not run).

# bench_tone FILE SECONDS: a 440 Hz tone at −12 dBFS, 48 kHz mono 16-bit.
bench_tone() {
  python3 - "$1" "$2" <<'PY'
import math, struct, sys, wave
w = wave.open(sys.argv[1], "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(48000)
w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / 48000))) for i in range(48000 * int(sys.argv[2]))))
w.close()
PY
}

# bench_start OUT CMD…: starts a peer that prints `READY <port>` on stdout (`linnet
# answer`, the aiortc and pion peers) with its stdout in OUT, and waits for that line.
# Sets bench_port, and adds the peer to bench_pids for the caller's EXIT trap
# (bench_stop). Not to be called in $(…): the pid would be lost with the subshell and
# the peer left running after the bench.
bench_pids=()
bench_start() {
  local out=$1; shift
  "$@" > "$out" 2>/dev/null &
  bench_pids+=($!)
  while ! grep -q READY "$out" 2>/dev/null; do
    kill -0 "${bench_pids[-1]}" 2>/dev/null || { echo "bench: $1 died before READY" >&2; return 70; }
    read -r -t 0.05 < /dev/null || true
  done
  bench_port=$(awk '/READY/ {print $2; exit}' "$out")
}

# bench_stop: stops every peer bench_start started.
bench_stop() {
  [ ${#bench_pids[@]} -eq 0 ] || kill "${bench_pids[@]}" 2>/dev/null || true
}
