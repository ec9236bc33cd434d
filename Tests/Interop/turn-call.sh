#!/usr/bin/env bash
# One Linnet call through coturn, in a network namespace of its own, with Linnet's UDP
# cut by a firewall as a locked-down network would (CLITests/TURNCallTests runs it).
#
#   turn-call.sh OUT FIREWALL LINNET PYTHON -- LINNET-ARGS...
#
# FIREWALL: none | turn-only (Linnet may send UDP only to the TURN port) | no-udp
# (Linnet sends no UDP at all: TURN over TCP or TLS, or nothing).
# Linnet runs as nobody (uid 65534), which is what the nft rules match: coturn and the
# aiortc peer (root) are the Internet beyond the firewall and are not filtered.
# In OUT: turn.log, peer.log, peer-report.json, peer.wav, linnet.log, and the files
# LINNET-ARGS name there. Linnet's exit status is this script's.
# The TURN server listens on 127.0.0.1:3478 (UDP and TCP) and 5349 (TLS, with OUT/ca.pem
# and OUT/server.pem/server.key, made here), user linnet / secret, realm linnet.test.
set -euo pipefail
out=$1 firewall=$2 linnet=$3 python=$4
shift 4
[ "${1:-}" = -- ] && shift
here=$(cd "$(dirname "$0")" && pwd)

if [ -z "${TURN_CALL_NETNS:-}" ]; then
    # Root in a fresh network namespace: only its loopback exists, nothing leaks out.
    export TURN_CALL_NETNS=1
    exec unshare -n -- "$0" "$out" "$firewall" "$linnet" "$python" -- "$@"
fi

ip link set lo up
case "$firewall" in
    none) ;;
    turn-only) nft -f - <<'EOF'
table inet linnet {
    chain out {
        type filter hook output priority 0; policy accept;
        meta skuid 65534 udp dport != 3478 counter drop
    }
}
EOF
    ;;
    no-udp) nft -f - <<'EOF'
table inet linnet {
    chain out {
        type filter hook output priority 0; policy accept;
        meta skuid 65534 meta l4proto udp counter drop
    }
}
EOF
    ;;
    *) echo "turn-call.sh: unknown firewall '$firewall'" >&2; exit 64 ;;
esac

# A CA of our own and a certificate for "localhost" (mbedtls matches names, not IPs).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$out/ca.key" -out "$out/ca.pem" \
    -days 2 -subj "/CN=Linnet TURN test CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$out/server.key" -out "$out/server.csr" \
    -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost\n' > "$out/server.ext"
openssl x509 -req -in "$out/server.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -CAcreateserial \
    -out "$out/server.pem" -days 2 -extfile "$out/server.ext" 2>/dev/null
chmod 644 "$out/ca.pem"

pids=()
# coturn 4.6 does not stop on SIGTERM while it holds sessions: SIGKILL (it keeps nothing
# worth flushing here). Only our own children are waited for.
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# coturn, with long-term credentials; loopback peers allowed (the peer is on loopback
# here). It is ready once it has logged its listeners: read its log as it grows.
turnserver -n -v --listening-ip=127.0.0.1 --relay-ip=127.0.0.1 --listening-port=3478 --tls-listening-port=5349 \
    --cert="$out/server.pem" --pkey="$out/server.key" --lt-cred-mech --user=linnet:secret --realm=linnet.test \
    --allow-loopback-peers --no-cli --no-dtls --no-multicast-peers --min-port=49152 --max-port=49400 \
    --pidfile="$out/turn.pid" --log-file=stdout --simple-log > "$out/turn.log" 2>&1 &
pids+=($!)
exec {turnlog}< <(exec tail -F "$out/turn.log" 2>/dev/null)
pids+=($!)
timeout 20 grep -q -m1 "Total General servers" <&$turnlog \
    || { echo "turn-call.sh: turnserver did not start" >&2; cat "$out/turn.log" >&2; exit 69; }

# The independent peer: prints READY <port> when listening.
exec {peerout}< <("$python" -u "$here/peer.py" --listen 127.0.0.1:0 --mode echo \
    --report "$out/peer-report.json" --record "$out/peer.wav" 2> "$out/peer.log"; echo "EXITED")
read -r -t 30 ready port <&$peerout || { echo "turn-call.sh: peer.py did not start" >&2; cat "$out/peer.log" >&2; exit 69; }
[ "$ready" = READY ] || { echo "turn-call.sh: peer.py said: $ready $port" >&2; exit 69; }
peerpid=$(pgrep -f "peer.py --listen 127.0.0.1:0 --mode echo --report $out/peer-report.json" | head -n1)

# Linnet, as nobody, the WHIP endpoint on loopback ("{PEER}" in the arguments is the
# peer's port).
args=()
for a in "$@"; do args+=("${a//\{PEER\}/$port}"); done
# TURN_CALL_KILL=1: the TURN server dies (SIGKILL) once Linnet's call is up.
if [ -n "${TURN_CALL_KILL:-}" ]; then
    : > "$out/linnet.log"
    ( exec {log}< <(exec tail -F "$out/linnet.log" 2>/dev/null)
      tailpid=$!
      grep -q -m1 "DTLS-SRTP up" <&$log && kill -9 "${pids[0]}" && echo "turn-call.sh: killed the TURN server" >> "$out/turn.log"
      kill "$tailpid" 2>/dev/null ) &
    pids+=($!)
fi

# A copy nobody can run whatever the checkout's permissions (a clone under /root).
cp "$linnet" "$out/linnet"
chmod 755 "$out/linnet"
status=0
if [ -n "${TURN_CALL_TIME:-}" ]; then
    # bench/turn.sh: Linnet's CPU (user, sys seconds) in OUT/linnet.time.
    TIMEFORMAT="%U %S"
    { time setpriv --reuid=65534 --regid=65534 --clear-groups -- "$out/linnet" "${args[@]}" > "$out/linnet.out" 2>> "$out/linnet.log" || status=$?; } 2> "$out/linnet.time"
else
    setpriv --reuid=65534 --regid=65534 --clear-groups -- "$out/linnet" "${args[@]}" > "$out/linnet.out" 2>> "$out/linnet.log" || status=$?
fi

# The peer writes its report on SIGTERM.
[ -n "$peerpid" ] && kill -TERM "$peerpid" 2>/dev/null || true
read -r -t 20 _ <&$peerout || true
if [ "$firewall" != none ]; then nft list ruleset > "$out/nft.txt"; fi
exit $status
