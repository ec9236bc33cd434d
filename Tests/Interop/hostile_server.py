#!/usr/bin/env python3
"""A lying signaling server for Linnet's security tests, standard library only.

Two listeners on 127.0.0.1: the "home" origin Linnet is configured with, and a
"foreign" origin (another port: another origin, RFC 6454) that logs every request it
gets. Real answers come from an upstream answerer (`linnet answer`) the home listener
proxies offers to, so a call can really connect.

  hostile_server.py --mode MODE --log requests.jsonl [--upstream http://127.0.0.1:P]
  stdout: READY <home-port> <foreign-port>

Modes (what the home listener does with an offer):
  redirect-foreign   307 to the foreign origin's /whip (which answers 503)
  redirect-ftp       307 to ftp://127.0.0.1/whip
  redirect-loop      307 to itself, forever
  location-foreign   proxies the offer upstream (WHIP), answers with the upstream's SDP
                     and a Location on the foreign origin
  backend-id ID      backend route: proxies upstream, replaces the voice id with ID
                     (a JSON value, e.g. '"a\\r\\nX-Injected: 1"', '"../../admin?x="', 42)
  echo-401           401 whose body echoes the request's headers, token included
  tcp-flood          proxies the offer upstream (WHIP) and answers with the upstream's
                     SDP whose only candidate is a TCP passive one (RFC 6544) on a
                     listener of its own that, once connected, sends empty RFC 4571
                     frames as fast as the socket takes them, forever
  turn-flood         the same upstream answer, untouched; and a "TURN server over TCP"
                     (its port printed as READY's third number) that floods every
                     connection with empty ChannelData (RFC 8656 §12.5) forever
  spray              proxies the offer upstream (WHIP) and, before answering, sprays
                     every host candidate of the offer from fresh ports for 0.6 s with
                     ClientHellos, DTLS-looking and SRTP-looking junk and STUN requests
                     without valid credentials (one stranger who read the offer)

Every request either listener receives is appended to --log as one JSON object:
{"listener": "home"|"foreign", "method", "path", "headers": {name: value}}.
"""
import argparse
import json
import os
import random
import signal
import socket
import struct
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()


def main():
    # Linnet's test runner blocks SIGTERM/SIGINT for its signalfd and the mask is
    # inherited: unblock them, or the test's terminate() would never end us.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    p = argparse.ArgumentParser()
    p.add_argument("--mode", required=True)
    p.add_argument("--id", default='"v1"', help="backend-id mode: the id, as JSON")
    p.add_argument("--log", required=True)
    p.add_argument("--upstream", default=None)
    a = p.parse_args()
    log = open(a.log, "a", buffering=1)

    def record(listener, handler):
        with lock:
            log.write(json.dumps({"listener": listener, "method": handler.command, "path": handler.path,
                                  "headers": {k: v for k, v in handler.headers.items()}}) + "\n")

    def body(handler):
        n = int(handler.headers.get("Content-Length") or 0)
        return handler.rfile.read(n) if n else b""

    def send(handler, status, headers=(), payload=b""):
        handler.send_response(status)
        for k, v in headers:
            handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(payload)))
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(payload)

    def upstream(path, data, content_type):
        req = urllib.request.Request(a.upstream + path, data=data, method="POST", headers={"Content-Type": content_type})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()

    def spray(offer, seconds=0.6):
        # Host candidates of the offer: "a=candidate:F 1 udp P IP PORT typ host".
        targets = []
        for line in offer.decode(errors="replace").splitlines():
            f = line.split()
            if line.startswith("a=candidate:") and len(f) >= 8 and f[2].lower() == "udp":
                targets.append((f[4], int(f[5])))
        # A genuine ClientHello: the one `openssl s_client -dtls1_2` sent, recorded as a
        # fuzz seed (Fuzz/make-seeds.py): a first byte, then a 2-byte length and the datagram.
        seed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../Fuzz/corpus/dtls/server-clienthello")
        raw = open(seed, "rb").read()
        hello = raw[3:3 + int.from_bytes(raw[1:3], "big")]
        stun = struct.pack(">HHI", 0x0001, 0, 0x2112A442) + os.urandom(12)
        sent = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            s = socket.socket(socket.AF_INET6 if ":" in (targets[0][0] if targets else "") else socket.AF_INET, socket.SOCK_DGRAM)
            for host, port in targets:
                for d in (hello, bytes([22]) + os.urandom(60), bytes([23, 0xFE, 0xFD]) + os.urandom(60),
                          bytes([0x80, 111]) + os.urandom(60), stun):
                    try:
                        s.sendto(d, (host, port))
                        sent += 1
                    except OSError:
                        pass
            s.close()
            time.sleep(0.01)
        with lock:
            log.write(json.dumps({"listener": "sprayer", "sent": sent, "targets": len(targets)}) + "\n")

    class Foreign(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def handle_any(self):
            record("foreign", self)
            body(self)
            send(self, 503 if self.command == "POST" else 200, [("Content-Type", "text/plain")], b"foreign\n")

        do_POST = do_DELETE = do_PATCH = do_GET = handle_any

    foreign = ThreadingHTTPServer(("127.0.0.1", 0), Foreign)
    fport = foreign.server_address[1]

    # The flooding stream server (tcp-flood, turn-flood): every connection gets the same
    # few bytes again and again until it closes. Counted in the log at the end of each.
    flood_unit = {"tcp-flood": b"\x00\x00" * 512, "turn-flood": b"\x40\x00\x00\x00" * 256}.get(a.mode)
    flood_port = 0
    if flood_unit:
        flooder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        flooder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        flooder.bind(("127.0.0.1", 0))
        flooder.listen(16)
        flood_port = flooder.getsockname()[1]

        def flood(conn):
            sent = 0
            try:
                while True:
                    sent += conn.send(flood_unit)
            except OSError:
                pass
            with lock:
                log.write(json.dumps({"listener": "flood", "sent": sent}) + "\n")

        def accept_floods():
            while True:
                conn, _ = flooder.accept()
                threading.Thread(target=flood, args=(conn,), daemon=True).start()

        threading.Thread(target=accept_floods, daemon=True).start()

    def tcp_only(answer):
        # The answer's candidates, replaced by one TCP passive candidate on the flooder.
        lines = [l for l in answer.decode().split("\r\n") if not l.startswith("a=candidate:") and l != "a=end-of-candidates"]
        out = []
        for l in lines:
            out.append(l)
            if l.startswith("m="):
                out.append(f"a=candidate:1 1 tcp 2105524479 127.0.0.1 {flood_port} typ host tcptype passive")
                out.append("a=end-of-candidates")
        return "\r\n".join(out).encode()

    class Home(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            record("home", self)
            data = body(self)
            m = a.mode
            if m == "redirect-foreign":
                return send(self, 307, [("Location", f"http://127.0.0.1:{fport}/whip")])
            if m == "redirect-ftp":
                return send(self, 307, [("Location", "ftp://127.0.0.1/whip")])
            if m == "redirect-loop":
                return send(self, 307, [("Location", self.path)])
            if m == "echo-401":
                echoed = "".join(f"{k}: {v}\n" for k, v in self.headers.items()).encode()
                return send(self, 401, [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")], b"you sent:\n" + echoed)
            if m == "spray" and self.path.startswith("/whip"):
                status, headers, answer = upstream("/whip", data, "application/sdp")
                send(self, 201, [("Content-Type", "application/sdp"), ("Location", headers.get("Location", "/whip/x"))], answer)
                # From the moment the answer is out: Linnet's DTLS server is waiting for a
                # ClientHello, and the stranger's may come first.
                return threading.Thread(target=spray, args=(data,)).start()
            if m in ("tcp-flood", "turn-flood") and self.path.startswith("/whip"):
                status, headers, answer = upstream("/whip", data, "application/sdp")
                if m == "tcp-flood":
                    answer = tcp_only(answer)
                return send(self, 201, [("Content-Type", "application/sdp"), ("Location", headers.get("Location", "/whip/x"))], answer)
            if m == "location-foreign" and self.path.startswith("/whip"):
                status, headers, answer = upstream("/whip", data, "application/sdp")
                loc = headers.get("Location", "/whip/x").split("/")[-1]
                return send(self, 201, [("Content-Type", "application/sdp"), ("Location", f"http://127.0.0.1:{fport}/whip/{loc}")], answer)
            if m == "backend-id" and self.path.startswith("/voice/") and not self.path.endswith("/close"):
                status, headers, answer = upstream(self.path, data, "application/json")
                j = json.loads(answer)
                j["id"] = json.loads(a.id)
                return send(self, 200, [("Content-Type", "application/json")], json.dumps(j).encode())
            if self.path.endswith("/close"):
                return send(self, 200, [("Content-Type", "application/json")], b'{"seconds": 1}')
            send(self, 404, [("Content-Type", "text/plain")], b"not here\n")

        def do_DELETE(self):
            record("home", self)
            send(self, 200)

        def do_PATCH(self):
            record("home", self)
            body(self)
            send(self, 405)

    home = ThreadingHTTPServer(("127.0.0.1", 0), Home)
    for s in (home, foreign):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print(f"READY {home.server_address[1]} {fport} {flood_port}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
