#!/usr/bin/env bash
# TURN and ICE-TCP figures on loopback, one BENCH line each:
#   turn_connect_ms_<path>   offer POST → first SRTP audio packet received, median of 5
#                            calls to aiortc through coturn: host (no relay), turn_udp,
#                            turn_tcp, turn_tls (ice-transport-policy relay, so the
#                            relayed pair is the only one and no nomination delay hides
#                            the relay's own cost), icetcp (webrtcbin gathering TCP only)
#   turn_cpu_ms_per_s_<path> Linnet's CPU (user+sys) per call-second of a 20 s echo call,
#                            host and turn_tls side by side in the same run
# Each call runs in a network namespace of its own (Tests/Interop/turn-call.sh, as root).
# Usage: bench/turn.sh [BINARY]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$top/build/host/linnet}
[ -x "$bin" ] || { echo "bench/turn.sh: build the release binary first (make release)" >&2; exit 69; }
[ "$(id -u)" -eq 0 ] || { echo "bench/turn.sh: skipped (needs root for network namespaces)" >&2; exit 0; }
command -v turnserver >/dev/null || { echo "bench/turn.sh: skipped (no turnserver: scripts/setup.sh installs coturn)" >&2; exit 0; }
. "$top/bench/lib.sh"
python=${AIORTC_PYTHON:-$("$top/Tests/Interop/setup.sh" 2>/dev/null | tail -n1)}
work=$(mktemp -d)
chmod 777 "$work"
trap 'rm -rf "$work"' EXIT
bench_tone "$work/tone.wav" 22
chmod 644 "$work/tone.wav"

median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "?"; else print a[int((NR + 1) / 2)]}'; }
connect_ms() { grep -o 'connect_ms=[0-9]*' "$1" | tail -n1 | cut -d= -f2; }

# call NAME SECONDS TIME? -- EXTRA LINNET ARGS: one call; prints connect_ms.
call() {
    local name=$1 seconds=$2 timed=$3; shift 4
    local out="$work/$name"
    rm -rf "$out"; mkdir -p "$out"; chmod 777 "$out"
    TURN_CALL_TIME=$timed "$top/Tests/Interop/turn-call.sh" "$out" none "$bin" "$python" -- \
        run --whip 'http://127.0.0.1:{PEER}/whip' --input "$work/tone.wav" --output "$out/out.wav" --seconds "$seconds" \
        --stats-seconds 1 --ice-username linnet --ice-credential secret --ca-file "$out/ca.pem" "$@" >/dev/null 2>&1 || true
    connect_ms "$out/linnet.log"
}

declare -A args=(
    [host]=""
    [turn_udp]="--ice-server turn:127.0.0.1:3478 --ice-transport-policy relay"
    [turn_tcp]="--ice-server turn:127.0.0.1:3478?transport=tcp --ice-transport-policy relay"
    [turn_tls]="--ice-server turns:localhost:5349 --ice-transport-policy relay"
)
for path in host turn_udp turn_tcp turn_tls; do
    # shellcheck disable=SC2086
    ms=$(for i in 1 2 3 4 5; do call "$path-$i" 2 "" -- ${args[$path]}; done | median)
    echo "BENCH turn_connect_ms_$path: $ms"
done

# ICE-TCP: webrtcbin (libnice) with TCP candidates only, no namespace needed.
gst=$("$top/Tests/Interop/gst-setup.sh" 2>/dev/null | tail -n1 || true)
if [ -x "$gst" ]; then
    ms=$(for i in 1 2 3 4 5; do
        exec {g}< <("$gst" -u "$top/Tests/Interop/gst_peer.py" answer --listen 127.0.0.1:0 --mode echo --ice-transport tcp \
            --report "$work/g.json" --record "$work/g.wav" 2>"$work/gst.log")
        read -r _ port <&$g
        "$bin" run --whip "http://127.0.0.1:$port/whip" --input "$work/tone.wav" --output "$work/g-out.wav" --seconds 2 \
            --stats-seconds 1 --interfaces lo 2> "$work/icetcp.log" || true
        pkill -TERM -f "gst_peer.py answer --listen 127.0.0.1:0 --mode echo --ice-transport tcp" || true
        read -r -t 10 _ <&$g || true
        exec {g}<&-
        connect_ms "$work/icetcp.log"
    done | median)
    echo "BENCH turn_connect_ms_icetcp: $ms"
else
    echo "bench/turn.sh: no GStreamer peer; turn_connect_ms_icetcp skipped" >&2
fi

# CPU per call-second: 20 s echo calls, host and TURN/TLS in the same run.
for path in host turn_tls; do
    # shellcheck disable=SC2086
    call "cpu-$path" 20 1 -- ${args[$path]} >/dev/null
    read -r u s < "$work/cpu-$path/linnet.time"
    echo "BENCH turn_cpu_ms_per_s_$path: $(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", (u + s) * 1000 / 20 }')"
done
