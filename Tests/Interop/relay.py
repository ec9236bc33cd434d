#!/usr/bin/env python3
"""UDP impairment relay for Linnet's end-to-end loopback tests.

Sits between a WebRTC offerer (`linnet run`) and an answerer (`linnet answer` or
peer.py) on this machine, with loss, burst loss, delay, jitter, reordering,
duplication, a black hole and NAT rebinding switchable while the call runs.

How it gets in the path. On loopback every socket can reach every other, so an
answerer that merely advertised the relay's address would still be reached directly:
ICE learns the real source of its checks as a peer-reflexive candidate (RFC 8445
§7.3.1.3) and leaves the relay. So the relay is also the HTTP signaling proxy and
rewrites the candidates of both descriptions, like a NAT between two networks:

    offerer O ──UDP──▶ [B] relay [A] ──UDP──▶ answerer N
      the answer's candidate (N) is replaced by B, the offer's (O) by A

O only ever sees B, N only ever sees A; datagrams O→B leave from A to N, N→A leave
from B to O. One call at a time; the first UDP candidate of each description is the
path (others are dropped from the SDP). `rebind` replaces socket B by a new one on
another port: O then receives from a new source port and what it sends to the old
one is lost, as when the answerer's NAT picks a new mapping (RFC 4787 §4.3).

Usage:

    relay.py --listen 127.0.0.1:0 --upstream http://127.0.0.1:8080 [--control 127.0.0.1:0]
             [--seed N] [--loss P] ...

Point the offerer at the relay's HTTP port instead of the answerer's (same paths:
WHIP `POST /whip`, `DELETE`, `PATCH`; backend `POST /voice/...`; JSON bodies with
an "sdp" field and application/sdp or trickle-ice-sdpfrag bodies are rewritten).
stdout: `READY <http port> <control port or 0>` once listening, then one JSON line per
`stats` command. Commands, one per line on stdin or on the TCP control port (each
answered with `ok ...` or `error ...`):

    loss P                 independent loss probability (0..1), both directions
    burst P R [HBAD] [KGOOD]  Gilbert-Elliott: P good→bad, R bad→good, loss in bad
                           (default 1) and in good (default 0); `burst off`
    delay MS               fixed one-way delay
    jitter MS              uniform extra delay 0..MS
    reorder P MS           with probability P hold a datagram MS ms more
    duplicate P            with probability P send it twice
    blackhole S            drop everything both ways for S seconds (0 ends it)
    rebind                 new socket B (the offerer sees a new source port)
    direction up|down|both the knobs above apply to O→N (up), N→O (down) or both
    at S COMMAND...        run COMMAND S seconds after the call's first datagram
                           (e.g. `at 3 blackhole 40`): timed faults without sleeps
    stats                  print counters as one JSON line (also the reply)
    reset                  all knobs off
    quit                   exit

Only the Python standard library is used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import sys
import time
from typing import Optional

CANDIDATE = re.compile(r"^(a=candidate:\S+ \d+ )(udp|UDP)( \d+ )(\S+) (\d+)( typ .*)$")


class Path:
    """One direction's impairment and counters."""

    def __init__(self) -> None:
        self.loss = 0.0
        self.burst: Optional[tuple[float, float, float, float]] = None
        self.bad = False
        self.delay = 0.0
        self.jitter = 0.0
        self.reorder = 0.0
        self.reorder_delay = 0.0
        self.duplicate = 0.0
        self.counters = {"received": 0, "forwarded": 0, "lost": 0, "blackholed": 0,
                         "duplicated": 0, "reordered": 0, "stale": 0}

    def reset(self) -> None:
        counters = self.counters
        self.__init__()
        self.counters = counters


class Relay:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.up = Path()    # offerer → answerer
        self.down = Path()  # answerer → offerer
        self.selected = "both"
        self.blackhole_until = 0.0
        self.offerer: Optional[tuple[str, int]] = None   # real address of O
        self.answerer: Optional[tuple[str, int]] = None  # real address of N
        self.sock_a: Optional[asyncio.DatagramTransport] = None
        self.sock_b: Optional[asyncio.DatagramTransport] = None
        self.rebinds = 0
        self.host = "127.0.0.1"
        self.started: Optional[float] = None
        self.scheduled: list[tuple[float, str]] = []

    # -- sockets -------------------------------------------------------------------

    async def open_sockets(self, host: str) -> None:
        self.host = host
        loop = asyncio.get_running_loop()
        self.sock_a, _ = await loop.create_datagram_endpoint(lambda: Side(self, "a"), local_addr=(host, 0))
        self.sock_b, _ = await loop.create_datagram_endpoint(lambda: Side(self, "b"), local_addr=(host, 0))

    def port(self, side: str) -> int:
        sock = self.sock_a if side == "a" else self.sock_b
        return sock.get_extra_info("sockname")[1]

    async def rebind(self) -> int:
        loop = asyncio.get_running_loop()
        old = self.sock_b
        self.sock_b, _ = await loop.create_datagram_endpoint(lambda: Side(self, "b"), local_addr=(self.host, 0))
        if old is not None:
            old.close()
        self.rebinds += 1
        return self.port("b")

    # -- forwarding ----------------------------------------------------------------

    def datagram(self, side: str, data: bytes, source: tuple[str, int], transport: asyncio.DatagramTransport) -> None:
        if transport is not (self.sock_a if side == "a" else self.sock_b):
            self.down.counters["stale"] += 1  # a closed (rebound) socket's leftovers
            return
        if side == "b":
            # From O (or anyone) to B: goes to N from A. O's address is learned from
            # the offer; a datagram from elsewhere is not part of the call.
            path, out, target = self.up, self.sock_a, self.answerer
            if self.offerer is not None and source != self.offerer:
                path.counters["stale"] += 1
                return
        else:
            path, out, target = self.down, self.sock_b, self.offerer
            if self.answerer is not None and source != self.answerer:
                path.counters["stale"] += 1
                return
        path.counters["received"] += 1
        if self.started is None:
            self.started = time.monotonic()
            for delay, command in self.scheduled:
                self.schedule(delay, command)
            self.scheduled = []
        if target is None or out is None:
            path.counters["stale"] += 1
            return
        if time.monotonic() < self.blackhole_until:
            path.counters["blackholed"] += 1
            return
        lost = self.rng.random() < path.loss
        if path.burst is not None:
            p, r, h_bad, k_good = path.burst
            if path.bad:
                if self.rng.random() < r:
                    path.bad = False
            elif self.rng.random() < p:
                path.bad = True
            if self.rng.random() < (h_bad if path.bad else k_good):
                lost = True
        if lost:
            path.counters["lost"] += 1
            return
        delay = path.delay + self.rng.random() * path.jitter
        if path.reorder and self.rng.random() < path.reorder:
            delay += path.reorder_delay
            path.counters["reordered"] += 1
        self.send_later(path, data, target, delay, side)
        if path.duplicate and self.rng.random() < path.duplicate:
            path.counters["duplicated"] += 1
            self.send_later(path, data, target, delay + self.rng.random() * (path.jitter + 0.001), side)

    def send_later(self, path: Path, data: bytes, target: tuple[str, int], delay: float, side: str) -> None:
        def go() -> None:
            # Resolve the socket at send time: after `rebind` the new B is used.
            out = self.sock_a if side == "b" else self.sock_b
            if out is not None:
                out.sendto(data, target)
                path.counters["forwarded"] += 1
        if delay <= 0:
            go()
        else:
            asyncio.get_running_loop().call_later(delay, go)

    # -- SDP rewriting ------------------------------------------------------------------

    def rewrite(self, sdp: str, from_offerer: bool) -> str:
        """Replaces the first UDP candidate with the relay socket the other side must
        use, learns the real address, and drops the other candidates."""
        out = []
        taken = False
        newline = "\r\n" if "\r\n" in sdp else "\n"
        for line in sdp.split(newline):
            m = CANDIDATE.match(line)
            if m:
                if taken or ":" in m.group(4):  # one path; IPv4 on loopback
                    continue
                real = (m.group(4), int(m.group(5)))
                if from_offerer:
                    self.offerer = real
                    port = self.port("a")
                else:
                    self.answerer = real
                    port = self.port("b")
                out.append(f"{m.group(1)}{m.group(2)}{m.group(3)}{self.host} {port}{m.group(6)}")
                taken = True
                continue
            out.append(line)
        return newline.join(out)

    def rewrite_body(self, body: bytes, content_type: str, from_offerer: bool) -> bytes:
        ct = content_type.lower()
        if ct.startswith("application/sdp") or ct.startswith("application/trickle-ice-sdpfrag"):
            return self.rewrite(body.decode("utf-8", "replace"), from_offerer).encode()
        if ct.startswith("application/json"):
            try:
                doc = json.loads(body)
            except ValueError:
                return body
            if isinstance(doc, dict) and isinstance(doc.get("sdp"), str):
                doc["sdp"] = self.rewrite(doc["sdp"], from_offerer)
                return json.dumps(doc).encode()
        return body

    # -- control ------------------------------------------------------------------

    def schedule(self, delay: float, command: str) -> None:
        async def run() -> None:
            reply = await self.command(command)
            print(f"at +{delay:g} s: {command}: {reply}", file=sys.stderr, flush=True)
        asyncio.get_running_loop().call_later(delay, lambda: asyncio.ensure_future(run()))

    def paths(self) -> list[Path]:
        return {"up": [self.up], "down": [self.down]}.get(self.selected, [self.up, self.down])

    def stats(self) -> dict:
        return {"up": self.up.counters, "down": self.down.counters, "rebinds": self.rebinds,
                "offerer": list(self.offerer) if self.offerer else None,
                "answerer": list(self.answerer) if self.answerer else None,
                "ports": {"a": self.port("a"), "b": self.port("b")},
                "blackhole_remaining": max(0.0, self.blackhole_until - time.monotonic())}

    async def command(self, line: str) -> str:
        words = line.split()
        if not words:
            return "ok"
        op, args = words[0].lower(), words[1:]
        try:
            nums = [float(a) for a in args if a not in ("off", "up", "down", "both")] if op != "at" else []
            if op == "loss":
                for p in self.paths():
                    p.loss = nums[0]
            elif op == "burst":
                for p in self.paths():
                    if args and args[0] == "off":
                        p.burst = None
                    else:
                        p.burst = (nums[0], nums[1], nums[2] if len(nums) > 2 else 1.0, nums[3] if len(nums) > 3 else 0.0)
                        p.bad = False
            elif op == "delay":
                for p in self.paths():
                    p.delay = nums[0] / 1000
            elif op == "jitter":
                for p in self.paths():
                    p.jitter = nums[0] / 1000
            elif op == "reorder":
                for p in self.paths():
                    p.reorder, p.reorder_delay = nums[0], nums[1] / 1000
            elif op == "duplicate":
                for p in self.paths():
                    p.duplicate = nums[0]
            elif op == "blackhole":
                self.blackhole_until = time.monotonic() + nums[0] if nums[0] > 0 else 0.0
            elif op == "rebind":
                return f"ok rebind {await self.rebind()}"
            elif op == "direction":
                if args[0] not in ("up", "down", "both"):
                    return "error direction is up, down or both"
                self.selected = args[0]
            elif op == "reset":
                self.up.reset()
                self.down.reset()
                self.blackhole_until = 0.0
            elif op == "at":
                delay, command = float(args[0]), " ".join(args[1:])
                if not command:
                    return "error at needs a command"
                if self.started is None:
                    self.scheduled.append((delay, command))
                else:
                    self.schedule(max(0.0, self.started + delay - time.monotonic()), command)
                return f"ok at {delay:g}"
            elif op == "stats":
                text = json.dumps(self.stats())
                print(text, flush=True)
                return "ok " + text
            elif op == "quit":
                sys.stdout.flush()
                os._exit(0)
            else:
                return f"error unknown command {op}"
        except (IndexError, ValueError):
            return f"error bad arguments for {op}"
        return "ok " + op


class Side(asyncio.DatagramProtocol):
    def __init__(self, relay: Relay, side: str) -> None:
        self.relay, self.side = relay, side
        self.transport: Optional[asyncio.DatagramTransport] = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        self.relay.datagram(self.side, data, (addr[0], addr[1]), self.transport)


# -- HTTP proxy (one request per connection upstream; bodies by Content-Length) -------

MAX_HEAD = 16384
MAX_BODY = 1 << 20


async def read_message(reader: asyncio.StreamReader) -> Optional[tuple[str, list[tuple[str, str]], bytes]]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return None
    if len(head) > MAX_HEAD:
        return None
    lines = head.decode("latin-1").split("\r\n")
    start, headers = lines[0], []
    for l in lines[1:]:
        if ":" in l:
            k, v = l.split(":", 1)
            headers.append((k.strip(), v.strip()))
    length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
    if length > MAX_BODY:
        return None
    body = await reader.readexactly(length) if length else b""
    return start, headers, body


def header(headers: list[tuple[str, str]], name: str) -> str:
    return next((v for k, v in headers if k.lower() == name.lower()), "")


async def proxy(relay: Relay, upstream: tuple[str, int], reader, writer) -> None:
    try:
        while True:
            request = await read_message(reader)
            if request is None:
                break
            start, headers, body = request
            body = relay.rewrite_body(body, header(headers, "Content-Type"), from_offerer=True)
            up_reader, up_writer = await asyncio.open_connection(*upstream)
            out = [start] + [f"{k}: {v}" for k, v in headers
                             if k.lower() not in ("content-length", "connection", "host")]
            out += [f"Host: {upstream[0]}:{upstream[1]}", f"Content-Length: {len(body)}", "Connection: close"]
            up_writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
            await up_writer.drain()
            response = await read_message(up_reader)
            up_writer.close()
            if response is None:
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
                break
            status, rheaders, rbody = response
            rbody = relay.rewrite_body(rbody, header(rheaders, "Content-Type"), from_offerer=False)
            out = [status] + [f"{k}: {v}" for k, v in rheaders if k.lower() not in ("content-length", "connection")]
            out += [f"Content-Length: {len(rbody)}"]
            writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + rbody)
            await writer.drain()
            if header(headers, "Connection").lower() == "close":
                break
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def control_client(relay: Relay, reader, writer) -> None:
    while True:
        line = await reader.readline()
        if not line:
            break
        writer.write((await relay.command(line.decode().strip()) + "\n").encode())
        await writer.drain()
    writer.close()


async def stdin_commands(relay: Relay) -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return  # stdin closed: keep running (the control port may still be used)
        reply = await relay.command(line.strip())
        print(reply, file=sys.stderr, flush=True)


def split_host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", default="127.0.0.1:0", help="HTTP proxy address (port 0: any)")
    ap.add_argument("--upstream", required=True, help="the answerer's HTTP base, e.g. http://127.0.0.1:8080")
    ap.add_argument("--control", help="TCP control address (line commands), e.g. 127.0.0.1:0")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--udp-host", default="127.0.0.1", help="where the relay's UDP sockets bind")
    ap.add_argument("commands", nargs="*", help="commands applied at start, e.g. 'loss 0.1'")
    args = ap.parse_args()

    relay = Relay(random.Random(args.seed))
    await relay.open_sockets(args.udp_host)
    for c in args.commands:
        reply = await relay.command(c)
        if reply.startswith("error"):
            sys.exit(f"relay: {reply}")
    up = re.sub(r"^https?://", "", args.upstream).split("/")[0]
    upstream = split_host_port(up)
    host, port = split_host_port(args.listen)
    server = await asyncio.start_server(lambda r, w: proxy(relay, upstream, r, w), host, port)
    http_port = server.sockets[0].getsockname()[1]
    control_port = 0
    if args.control:
        chost, cport = split_host_port(args.control)
        control = await asyncio.start_server(lambda r, w: control_client(relay, r, w), chost, cport)
        control_port = control.sockets[0].getsockname()[1]
    # A parent may have left SIGTERM blocked or ignored (inherited through exec): end on
    # it regardless, so `terminate()` from a test always works.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, lambda: os._exit(0))
    print(f"READY {http_port} {control_port}", flush=True)
    asyncio.get_running_loop().create_task(stdin_commands(relay))
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except (KeyboardInterrupt, RuntimeError):
        pass
