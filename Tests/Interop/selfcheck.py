#!/usr/bin/env python3
"""Self-check of peer.py without Linnet: an aiortc offerer against the peer.

Starts peer.py in each mode, offers from an aiortc client (a 1 kHz tone as its
microphone and an `oai-events` data channel) on each route, and checks what a Linnet
interop test relies on: the call connects; the answer carries candidates; echo mode
returns the client's own 1 kHz tone and echoes small and 100 KB messages (text as
text, binary as binary); tone mode plays 440 Hz; the peer's own `peer-events` channel
brings a hello and a 100 KB message (and closes when asked to); the openai script's
events come in the documented order; the recorded WAV holds what the client sent; the
report holds the states, roles, counters and events; fault flags give the statuses
and bodies they promise.

Frequencies are measured independently of the generator: a Hann-windowed FFT of the
received samples, its peak bin refined by parabolic interpolation, plus the share of
the spectrum's power within +-25 Hz of the expected frequency.

Usage: selfcheck.py [-v]. Prints PASS/FAIL lines and a closing "N passed, N failed".
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # importing peer.py must not leave __pycache__ in the tree

import peer  # noqa: E402  (the same generator code, used for the client's microphone)
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription  # noqa: E402
from aiortc.mediastreams import MediaStreamError  # noqa: E402

CLIENT_TONE = 1000.0
PEER_TONE = 440.0
BIG = 100_000
TOKEN = "selfcheck-token"
VERBOSE = "-v" in sys.argv

results: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    results.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}", flush=True)
    return bool(ok)


# --------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------


def spectrum_peak(samples: np.ndarray, rate: int = 48000) -> tuple[float, float, float]:
    """Returns (peak frequency Hz, share of power near the peak, RMS dBFS)."""
    x = samples.astype(np.float64)
    x = x - x.mean()
    rms = float(np.sqrt(np.mean(x * x))) if len(x) else 0.0
    dbfs = 20 * np.log10(max(rms, 1e-9) / 32768.0)
    window = np.hanning(len(x))
    power = np.abs(np.fft.rfft(x * window)) ** 2
    power[0] = 0.0
    k = int(np.argmax(power))
    if 0 < k < len(power) - 1:
        a, b, c = np.log(power[k - 1] + 1e-30), np.log(power[k] + 1e-30), np.log(power[k + 1] + 1e-30)
        offset = 0.5 * (a - c) / (a - 2 * b + c)
    else:
        offset = 0.0
    freq = (k + offset) * rate / len(x)
    bin_hz = rate / len(x)
    half = int(round(25 / bin_hz))
    share = float(power[max(0, k - half):k + half + 1].sum() / max(power.sum(), 1e-30))
    return freq, share, dbfs


def check_tone(name: str, samples: np.ndarray, expected: float) -> None:
    if len(samples) < 4800:
        check(name, False, f"only {len(samples)} samples received")
        return
    freq, share, dbfs = spectrum_peak(samples)
    ok = abs(freq - expected) < 5.0 and share > 0.9 and dbfs > -30
    check(name, ok, f"peak {freq:.1f} Hz (want {expected:.0f}), {share * 100:.1f}% of power "
                    f"within 25 Hz, {dbfs:.1f} dBFS RMS, {len(samples) / 48000:.2f} s")


# --------------------------------------------------------------------------------------
# HTTP (urllib in a thread: an independent client, not the peer's own code)
# --------------------------------------------------------------------------------------


def _http(method: str, url: str, body: bytes | None, headers: dict) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


async def http(method: str, url: str, body: bytes | None = None, headers: dict | None = None):
    return await asyncio.to_thread(_http, method, url, body, headers or {})


# --------------------------------------------------------------------------------------
# Peer process
# --------------------------------------------------------------------------------------


class PeerProcess:
    def __init__(self, tmp: str, name: str, *args: str) -> None:
        self.name = name
        self.report = os.path.join(tmp, f"{name}.json")
        self.stderr_path = os.path.join(tmp, f"{name}.log")
        self.args = ["--listen", "127.0.0.1:0", "--report", self.report, *args]
        self.proc = None
        self.port = 0

    async def start(self) -> None:
        self.stderr = open(self.stderr_path, "wb")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, os.path.join(HERE, "peer.py"), *self.args,
            stdout=asyncio.subprocess.PIPE, stderr=self.stderr)
        line = await asyncio.wait_for(self.proc.stdout.readline(), 20)
        parts = line.decode().split()
        if len(parts) != 2 or parts[0] != "READY":
            raise RuntimeError(f"{self.name}: expected READY, got {line!r}")
        self.port = int(parts[1])

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> dict:
        """SIGTERM, wait, and return the report."""
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 20)
        self.stderr.close()
        check(f"{self.name}: exits 0 on SIGTERM", code == 0, f"exit {code}")
        with open(self.report) as f:
            return json.load(f)

    def kill(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.kill()


# --------------------------------------------------------------------------------------
# Client (offerer)
# --------------------------------------------------------------------------------------


class Client:
    def __init__(self, name: str, sha1_80_only: bool = False) -> None:
        self.name = name
        # Like Linnet (mbedtls 2.28 knows only the SHA1 profiles): offer just SHA1_80.
        self.sha1_80_only = sha1_80_only
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.sine = peer.Sine(CLIENT_TONE, -12.0)
        self.pc.addTrack(peer.PacedTrack(self.sine.next))
        self.channel = self.pc.createDataChannel("oai-events")
        self.inbox: dict[str, asyncio.Queue] = {"oai-events": asyncio.Queue()}
        self.channels = {"oai-events": self.channel}
        self.closed_channels: set[str] = set()
        self.audio: list[tuple[float, np.ndarray]] = []
        self.connected = asyncio.Event()
        self.opened = asyncio.Event()
        self.peer_channel_seen = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.states: list[str] = []

        @self.channel.on("open")
        def _open() -> None:
            self.opened.set()

        @self.channel.on("message")
        def _msg(m) -> None:
            self.inbox["oai-events"].put_nowait(m)

        @self.pc.on("connectionstatechange")
        def _state() -> None:
            self.states.append(self.pc.connectionState)
            if self.pc.connectionState == "connected":
                self.connected.set()

        @self.pc.on("track")
        def _track(track) -> None:
            self.tasks.append(asyncio.ensure_future(self._consume(track)))

        @self.pc.on("datachannel")
        def _dc(ch) -> None:
            self.inbox.setdefault(ch.label, asyncio.Queue())
            self.channels[ch.label] = ch
            self.peer_channel_seen.set()

            @ch.on("message")
            def _m(m) -> None:
                self.inbox[ch.label].put_nowait(m)

            @ch.on("close")
            def _c() -> None:
                self.closed_channels.add(ch.label)

    async def _consume(self, track) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.audio.append((loop.time(), peer.frame_to_mono(frame)))

    def audio_between(self, start: float, end: float) -> np.ndarray:
        chunks = [s for t, s in self.audio if start <= t <= end]
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)

    async def offer(self) -> str:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        if self.sha1_80_only:
            from aiortc.rtcdtlstransport import SRTP_AES128_CM_SHA1_80
            for transceiver in self.pc.getTransceivers():
                transceiver.receiver.transport._srtp_profiles = [SRTP_AES128_CM_SHA1_80]
            self.pc.sctp.transport._srtp_profiles = [SRTP_AES128_CM_SHA1_80]
        return self.pc.localDescription.sdp

    async def accept(self, answer: str) -> None:
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        await asyncio.wait_for(self.connected.wait(), 15)
        await asyncio.wait_for(self.opened.wait(), 10)

    async def next_message(self, label: str, timeout: float = 10.0):
        self.inbox.setdefault(label, asyncio.Queue())
        return await asyncio.wait_for(self.inbox[label].get(), timeout)

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await self.pc.close()


async def connect(client: Client, peer_proc: PeerProcess, route: str,
                  token: str | None = None) -> tuple[str, str]:
    """Offers on `route`; returns (answer sdp, URL or path that ends the call)."""
    offer = await client.offer()
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    if route == "whip":
        status, headers, body = await http("POST", peer_proc.base + "/whip", offer.encode(),
                                           {"Content-Type": "application/sdp", **auth})
        ok = status == 201 and headers.get("content-type") == "application/sdp" \
            and headers.get("location", "").startswith("/whip/")
        check(f"{client.name}: WHIP POST -> 201, application/sdp, Location", ok,
              f"{status} {headers.get('content-type')} {headers.get('location')}")
        answer, end = body.decode(), ("DELETE", headers.get("location", ""))
    elif route == "openai":
        status, headers, body = await http("POST", peer_proc.base + "/v1/realtime/calls",
                                           offer.encode(),
                                           {"Content-Type": "application/sdp", **auth})
        location = headers.get("location", "")
        ok = status == 201 and location.startswith("/v1/realtime/calls/")
        check(f"{client.name}: realtime calls POST -> 201 + Location", ok, f"{status} {location}")
        answer, end = body.decode(), ("POST", location + "/hangup")
    else:
        status, headers, body = await http("POST", peer_proc.base + "/voice/chat42",
                                           json.dumps({"sdp": offer}).encode(),
                                           {"Content-Type": "application/json", **auth})
        obj = json.loads(body) if status == 200 else {}
        check(f"{client.name}: backend POST /voice/chat42 -> 200 {{id, sdp}}",
              status == 200 and "id" in obj and "sdp" in obj, f"{status}")
        answer, end = obj.get("sdp", ""), ("POST", f"/voice/chat42/{obj.get('id')}/close")
    check(f"{client.name}: answer has candidates (gathered before answering)",
          # The OpenAI route's answer is shaped like OpenAI's, which has no end-of-candidates.
          "a=candidate:" in answer and ("a=end-of-candidates" in answer or route == "openai"))
    check(f"{client.name}: answer is DTLS active (peer is DTLS client)", "a=setup:active" in answer)
    await client.accept(answer)
    check(f"{client.name}: connected", client.connected.is_set(), ",".join(client.states))
    return answer, end


async def hang_up(client: Client, peer_proc: PeerProcess, end: tuple[str, str], route: str,
                  token: str | None = None) -> None:
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    status, headers, body = await http(end[0], peer_proc.base + end[1], b"" if end[0] == "POST"
                                       else None, auth)
    if route == "backend":
        obj = json.loads(body) if status == 200 else {}
        seconds = obj.get("seconds")
        check(f"{client.name}: close -> 200 {{seconds}}", status == 200
              and isinstance(seconds, (int, float)) and seconds > 0.5, f"{status} {obj}")
    else:
        check(f"{client.name}: {end[0]} {end[1].split('/')[1]} end -> 200", status == 200, str(status))
    await client.close()


# --------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------


async def echo_call(peer_proc: PeerProcess, route: str, token: str | None) -> None:
    client = Client(f"echo/{route}", sha1_80_only=(route == "backend"))
    _, end = await connect(client, peer_proc, route, token)
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    # Data channel echo: small and 100 KB, text and binary, in order.
    small_text = "hello from the selfcheck"
    small_bin = bytes(range(256)) * 2
    big_text = ("echo-" + "abcdefghij" * (BIG // 10))[:BIG]
    big_bin = np.random.default_rng(7).integers(0, 256, BIG, dtype=np.uint8).tobytes()
    sent = [small_text, small_bin, big_text, big_bin, ""]
    for m in sent:
        client.channel.send(m)
    got = [await client.next_message("oai-events") for _ in sent]
    for m, g in zip(sent, got):
        kind = "text" if isinstance(m, str) else "binary"
        check(f"{client.name}: channel echo {kind} {len(m)} bytes",
              type(g) is type(m) and g == m, f"got {type(g).__name__} {len(g)}")

    # The peer's own channel: hello, then 100 KB of text.
    await asyncio.wait_for(client.peer_channel_seen.wait(), 10)
    hello = json.loads(await client.next_message("peer-events"))
    check(f"{client.name}: peer-events hello", hello.get("type") == "hello", str(hello))
    big = await client.next_message("peer-events")
    check(f"{client.name}: peer-events 100 KB text", isinstance(big, str) and len(big) == BIG
          and big.startswith("big:0123456789"), f"{len(big)}")

    # Audio: our own 1 kHz tone comes back.
    await asyncio.sleep(max(0.0, t0 + 1.6 - loop.time()))
    check_tone(f"{client.name}: echoed audio is our 1 kHz tone",
               client.audio_between(t0 + 0.4, t0 + 1.6), CLIENT_TONE)
    await hang_up(client, peer_proc, end, route, token)


async def tone_call(peer_proc: PeerProcess, route: str, closes_channel: bool) -> None:
    client = Client(f"tone/{route}")
    _, end = await connect(client, peer_proc, route)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await asyncio.wait_for(client.peer_channel_seen.wait(), 10)
    hello = json.loads(await client.next_message("peer-events"))
    check(f"{client.name}: peer-events hello", hello.get("type") == "hello")
    # tone mode does not echo: nothing comes back on oai-events.
    client.channel.send("not echoed")
    await asyncio.sleep(max(0.0, t0 + 1.4 - loop.time()))
    check(f"{client.name}: no echo on oai-events in tone mode", client.inbox["oai-events"].empty())
    check_tone(f"{client.name}: received 440 Hz", client.audio_between(t0 + 0.3, t0 + 1.4),
               PEER_TONE)
    if closes_channel:
        deadline = loop.time() + 5
        while "peer-events" not in client.closed_channels and loop.time() < deadline:
            await asyncio.sleep(0.05)
        check(f"{client.name}: peer closed peer-events (--close-channel-after)",
              "peer-events" in client.closed_channels)
    await hang_up(client, peer_proc, end, route)


async def openai_call(peer_proc: PeerProcess, route: str) -> list[str]:
    """Runs the scripted conversation; returns the client event types it sent."""
    client = Client(f"openai/{route}")
    _, end = await connect(client, peer_proc, route)
    loop = asyncio.get_running_loop()
    sent: list[str] = []

    def send(event: dict) -> None:
        sent.append(event["type"])
        client.channel.send(json.dumps(event))

    async def expect(types: list[str], name: str) -> list[dict]:
        events = []
        for _ in types:
            events.append(json.loads(await client.next_message("oai-events")))
        got = [e["type"] for e in events]
        check(f"{client.name}: {name}", got == types, f"got {got}")
        return events

    (created,) = await expect(["session.created"], "session.created on open")
    check(f"{client.name}: no peer-events channel in openai mode",
          not client.peer_channel_seen.is_set())

    send({"type": "session.update", "session": {"type": "realtime",
                                                "audio": {"input": {"turn_detection": None}}}})
    (updated,) = await expect(["session.updated"], "session.update -> session.updated")
    check(f"{client.name}: session.updated carries the update",
          updated["session"]["audio"]["input"]["turn_detection"] is None
          and updated["session"]["id"] == created["session"]["id"])

    # Clear then commit at once: less than 100 ms of audio -> the real server's error.
    send({"type": "input_audio_buffer.clear"})
    send({"type": "input_audio_buffer.commit", "event_id": "evt_short"})
    _, err = await expect(["input_audio_buffer.cleared", "error"], "clear + early commit")
    check(f"{client.name}: early commit -> input_audio_buffer_commit_empty",
          err["error"]["code"] == "input_audio_buffer_commit_empty"
          and err["error"]["event_id"] == "evt_short", json.dumps(err["error"])[:160])

    await asyncio.sleep(0.5)  # "hold the button": audio flows
    t_quiet = loop.time()
    send({"type": "input_audio_buffer.commit"})
    committed, transcript = await expect(
        ["input_audio_buffer.committed", "conversation.item.input_audio_transcription.completed"],
        "commit -> committed, transcription.completed")
    check(f"{client.name}: transcript 'hello linnet'", transcript["transcript"] == "hello linnet"
          and transcript["item_id"] == committed["item_id"])
    silent = client.audio_between(t_quiet - 0.4, t_quiet)
    check(f"{client.name}: provider silent before it speaks",
          len(silent) > 0 and int(np.abs(silent.astype(np.int32)).max()) < 200,
          f"peak {int(np.abs(silent.astype(np.int32)).max()) if len(silent) else None}")

    send({"type": "response.create"})
    t_speak = loop.time()
    events = []
    while True:
        e = json.loads(await client.next_message("oai-events"))
        events.append(e)
        if e["type"] == "output_audio_buffer.stopped":
            break
    types = [e["type"] for e in events]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta"]
    n = len(deltas)
    want = (["response.created", "output_audio_buffer.started"]
            + ["response.output_audio_transcript.delta"] * n
            + ["response.output_audio_transcript.done", "response.done",
               "output_audio_buffer.stopped"])
    check(f"{client.name}: response event order", n >= 2 and types == want, f"{types}")
    done = next(e for e in events if e["type"] == "response.output_audio_transcript.done")
    check(f"{client.name}: deltas add up to the transcript",
          "".join(deltas) == done["transcript"] == "Hi, this is the test provider.")
    rdone = next(e for e in events if e["type"] == "response.done")
    check(f"{client.name}: response.done completed", rdone["response"]["status"] == "completed")
    check_tone(f"{client.name}: the voice is 440 Hz while speaking",
               client.audio_between(t_speak + 0.3, t_speak + 1.3), PEER_TONE)

    # Barge-in: a response cancelled while speaking.
    send({"type": "response.create"})
    await expect(["response.created", "output_audio_buffer.started"], "second response starts")
    send({"type": "response.cancel"})
    events = []
    while True:
        e = json.loads(await client.next_message("oai-events"))
        events.append(e)
        if e["type"] == "output_audio_buffer.stopped":
            break
    rdone = [e for e in events if e["type"] == "response.done"]
    check(f"{client.name}: response.cancel -> response.done cancelled, stopped",
          len(rdone) == 1 and rdone[0]["response"]["status"] == "cancelled",
          f"{[e['type'] for e in events]}")
    await asyncio.sleep(0.4)
    t_after = loop.time()
    await asyncio.sleep(0.4)
    after = client.audio_between(t_after, t_after + 0.4)
    check(f"{client.name}: voice stops after cancel",
          len(after) > 0 and int(np.abs(after.astype(np.int32)).max()) < 200)

    send({"type": "no.such.event"})
    (err,) = await expect(["error"], "unknown event -> error")
    await hang_up(client, peer_proc, end, route)
    return sent


async def fault_checks(tmp: str) -> None:
    offer = "v=0\r\n"  # never parsed: the fault answers come first
    fail = PeerProcess(tmp, "fail500", "--mode", "echo", "--fail-status", "500")
    garbage = PeerProcess(tmp, "garbage", "--mode", "echo", "--garbage")
    timed = PeerProcess(tmp, "timed", "--mode", "tone", "--seconds", "1")
    await fail.start()
    await garbage.start()
    await timed.start()
    try:
        s, h, b = await http("POST", fail.base + "/whip", offer.encode(),
                             {"Content-Type": "application/sdp"})
        check("fault: --fail-status 500 on WHIP -> 500 HTML", s == 500
              and h.get("content-type", "").startswith("text/html") and b"<html>" in b, str(s))
        s, h, b = await http("POST", fail.base + "/v1/realtime/calls", offer.encode(),
                             {"Content-Type": "application/sdp"})
        check("fault: --fail-status 500 on realtime -> 500 JSON error",
              s == 500 and "error" in json.loads(b), str(s))
        s, h, b = await http("POST", fail.base + "/voice/c1", json.dumps({"sdp": offer}).encode(),
                             {"Content-Type": "application/json"})
        check("fault: --fail-status 500 on backend -> 500 JSON", s == 500 and "error" in json.loads(b))
        s, h, b = await http("POST", garbage.base + "/whip", offer.encode(),
                             {"Content-Type": "application/sdp"})
        check("fault: --garbage -> 201 with a body that is not SDP",
              s == 201 and not b.startswith(b"v=0") and "location" in h, f"{s} {b[:30]!r}")
        s, h, b = await http("POST", garbage.base + "/voice/c1", json.dumps({"sdp": offer}).encode(),
                             {"Content-Type": "application/json"})
        check("fault: --garbage on backend -> sdp field not SDP",
              s == 200 and not json.loads(b)["sdp"].startswith("v=0"))
        s, _, _ = await http("POST", garbage.base + "/whip", offer.encode(),
                             {"Content-Type": "text/plain"})
        check("WHIP with wrong Content-Type -> 415", s == 415, str(s))
        s, _, _ = await http("GET", garbage.base + "/nowhere")
        check("unknown route -> 404", s == 404, str(s))
        s, h, b = await http("POST", timed.base + "/v1/realtime/calls", offer.encode(),
                             {"Content-Type": "application/sdp"})
        check("an offer without media -> 400 invalid_offer",
              s == 400 and json.loads(b)["error"]["code"] == "invalid_offer", str(s))
        code = await asyncio.wait_for(timed.proc.wait(), 10)
        with open(timed.report) as f:
            rep = json.load(f)
        check("--seconds 1: exits 0 by itself and writes the report",
              code == 0 and rep["exit_reason"] == "--seconds 1.0" and rep["offers"] == 1,
              f"exit {code}, {rep['exit_reason']}")
    finally:
        await fail.stop()
        await garbage.stop()
        timed.kill()


def read_wav(path: str) -> tuple[int, int, int, np.ndarray]:
    with wave.open(path, "rb") as w:
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return w.getframerate(), w.getnchannels(), w.getsampwidth(), data


async def main() -> int:
    started = time.monotonic()
    # The client gathers on loopback only, like the peer: nothing leaves the machine.
    peer.restrict_host_addresses(["127.0.0.1"])
    tmp = tempfile.mkdtemp(prefix="linnet-interop-")
    wav = os.path.join(tmp, "echo.wav")
    echo = PeerProcess(tmp, "echo", "--mode", "echo", "--token", TOKEN, "--record", wav)
    tone = PeerProcess(tmp, "tone", "--mode", "tone", "--close-channel-after", "1.0")
    oai = PeerProcess(tmp, "openai", "--mode", "openai")
    procs = [echo, tone, oai]
    try:
        for p in procs:
            await p.start()
        check("peers print READY <port>", all(p.port for p in procs),
              ", ".join(f"{p.name}:{p.port}" for p in procs))

        # Auth: no token / wrong token -> 401.
        s, h, _ = await http("POST", echo.base + "/whip", b"v=0\r\n",
                             {"Content-Type": "application/sdp"})
        check("echo: --token, no Authorization -> 401", s == 401
              and "bearer" in h.get("www-authenticate", "").lower(), str(s))
        s, _, _ = await http("POST", echo.base + "/whip", b"v=0\r\n",
                             {"Content-Type": "application/sdp", "Authorization": "Bearer nope"})
        check("echo: wrong token -> 401", s == 401, str(s))

        for route in ("whip", "backend", "openai"):
            await echo_call(echo, route, TOKEN)
        for route in ("whip", "backend", "openai"):
            await tone_call(tone, route, closes_channel=(route == "whip"))
        sent_by_route = {}
        for route in ("openai", "whip", "backend"):
            sent_by_route[route] = await openai_call(oai, route)

        await fault_checks(tmp)

        # Reports (written at exit).
        rep = await echo.stop()
        sessions = rep["sessions"]
        check("echo report: three calls, one per route",
              [s["route"] for s in sessions] == ["whip", "backend", "openai"])
        for s in sessions:
            states = [x["state"] for x in s["states"] if x["what"] == "connection"]
            oai_ch = next(c for c in s["data_channels"] if c["label"] == "oai-events")
            conditions = {
                "connected": "connected" in states,
                "dtls client": s["dtls_role"] == "client",
                "srtp": s["srtp_profile"] == ("SRTP_AES128_CM_SHA1_80" if s["route"] == "backend"
                                              else "SRTP_AEAD_AES_256_GCM"),
                "cipher": bool(s["tls_cipher"]),
                "loopback pair": bool(s["selected_pairs"])
                and s["selected_pairs"][0]["local"]["ip"] == "127.0.0.1",
                "rtp in": s["rtp_packets_received"] > 40 and s["rtp_bytes_received"] > 1000,
                # A packet in flight at hang-up may reach the transport after the
                # receiver has stopped: allow that one, not a systematic drop.
                "all rtp routed": 0 <= s["rtp_transport_packets_received"]
                - s["rtp_routed_packets"] <= 2,
                "rtp out": s["rtp_packets_sent"] > 40,
                "labels": sorted(s["data_channel_labels"]) == ["oai-events", "peer-events"],
                "messages": oai_ch["received_count"] == 5
                and oai_ch["sizes"] == [24, 512, BIG, BIG, 0],
                "seconds": s["call_seconds"] > 0.5,
            }
            failed = [k for k, v in conditions.items() if not v]
            check(f"echo report ({s['route']}): states, DTLS client, SRTP, pair, RTP, channels",
                  not failed, f"{s['srtp_profile']} {s['tls_cipher']} rx {s['rtp_packets_received']}"
                              f"/{s['rtp_bytes_received']} B tx {s['rtp_packets_sent']}"
                              + (f"; failed: {failed}" if failed else ""))
        rate, channels, width, data = read_wav(wav)
        check("echo --record: 48 kHz mono 16-bit", (rate, channels, width) == (48000, 1, 2))
        check("echo --record: holds about as long as the calls",
              len(data) / 48000 > 4.0, f"{len(data) / 48000:.2f} s")
        # Skip the first 0.2 s (codec start-up).
        check_tone("echo --record: what the client sent is 1 kHz", data[9600:9600 + 48000],
                   CLIENT_TONE)

        rep = await tone.stop()
        check("tone report: three calls, each connected, RTP sent",
              len(rep["sessions"]) == 3 and all(s["rtp_packets_sent"] > 40 for s in rep["sessions"]))
        first = rep["sessions"][0]
        peer_ch = next(c for c in first["data_channels"] if c["label"] == "peer-events")
        check("tone report: peer-events sent hello + 100 KB and closed",
              peer_ch["sent_sizes"][1] == BIG and peer_ch["closed_at"] is not None,
              str(peer_ch["sent_sizes"]))

        rep = await oai.stop()
        for s in rep["sessions"]:
            got = [e["type"] for e in s["openai_events_received"]]
            check(f"openai report ({s['route']}): events received in order",
                  got == sent_by_route[s["route"]], f"{got}")
    finally:
        for p in procs:
            p.kill()

    passed = sum(1 for _, ok, _ in results if ok)
    failed = len(results) - passed
    print(f"selfcheck took {time.monotonic() - started:.1f} s; logs and reports in {tmp}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
