#!/usr/bin/env python3
"""Independent WebRTC test peer for Linnet's interop tests.

An aiortc answerer behind a small HTTP/1.1 server on loopback. It speaks the three
signaling routes Linnet uses (WHIP, the app backend's voice route and the OpenAI
Realtime calls route), answers every offer after ICE gathering has finished (so the
answer carries its candidates, as real providers do: none of them trickles over HTTP)
and then echoes, plays a tone, or acts as a scripted OpenAI Realtime server.

Usage (see README.md for the whole list):

    peer.py --listen 127.0.0.1:0 --mode echo|tone|openai [--record out.wav]
            [--report report.json] [--seconds N] [--token T]
            [--fail-status 500] [--garbage] [--close-channel-after N]

It prints `READY <port>` on stdout once listening and logs to stderr. The report is
rewritten whenever a call ends and once more at exit (SIGTERM/SIGINT, --seconds,
--once), always before the HTTP response that ends a call is sent, so a harness may
read it as soon as Linnet has hung up.

Design notes:
- Traffic stays on this machine: no STUN server is configured (aiortc would use a
  public one by default) and host candidates are gathered on loopback only unless
  --host-addresses says otherwise (aioice skips 127.0.0.1 on its own).
- The HTTP server is hand-written on asyncio streams so that fault injection (a wrong
  status, an HTML error page, a body that is not SDP) is exact and needs no extra
  dependency. It understands Content-Length and chunked request bodies, keep-alive
  and Connection: close.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import fractions
import json
import logging
import math
import os
import secrets
import signal
import struct
import sys
import time
from typing import Any, Optional

import numpy as np

import aioice.ice
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

log = logging.getLogger("peer")

SAMPLE_RATE = 48000
FRAME_SAMPLES = 960  # 20 ms at 48 kHz
TIME_BASE = fractions.Fraction(1, SAMPLE_RATE)

TEXT_SAMPLE_CHARS = 200  # texts are truncated to this in the report
MAX_LOGGED_MESSAGES = 1000


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(8)


def truncate(text: str, limit: int = TEXT_SAMPLE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"...(+{len(text) - limit} chars)"


# --------------------------------------------------------------------------------------
# Audio
# --------------------------------------------------------------------------------------


class Sine:
    """A phase-continuous sine generator (int16 mono)."""

    def __init__(self, freq: float, dbfs: float) -> None:
        self.freq = freq
        # Peak amplitude: -12 dBFS of a full-scale sine is 10^(-12/20) * 32767 = 8225.
        self.amplitude = 32767.0 * (10.0 ** (dbfs / 20.0))
        self.phase = 0.0

    def next(self, samples: int) -> np.ndarray:
        step = 2.0 * math.pi * self.freq / SAMPLE_RATE
        t = self.phase + step * np.arange(samples)
        self.phase = float((self.phase + step * samples) % (2.0 * math.pi))
        return np.round(self.amplitude * np.sin(t)).astype(np.int16)


def mono_frame(samples: np.ndarray, pts: int) -> AudioFrame:
    frame = AudioFrame(format="s16", layout="mono", samples=len(samples))
    frame.planes[0].update(samples.astype("<i2").tobytes())
    frame.sample_rate = SAMPLE_RATE
    frame.pts = pts
    frame.time_base = TIME_BASE
    return frame


def frame_to_mono(frame: AudioFrame) -> np.ndarray:
    """Decoded audio (aiortc's Opus decoder gives packed s16 stereo) as int16 mono."""
    data = frame.to_ndarray()
    channels = len(frame.layout.channels)
    if frame.format.is_planar:
        pcm = data.astype(np.int32).mean(axis=0)
    else:
        pcm = data.reshape(-1, channels).astype(np.int32).mean(axis=1)
    if frame.format.name != "s16":
        # Float formats: scale to 16-bit.
        pcm = np.clip(pcm * 32767.0, -32768, 32767)
    return np.round(pcm).astype(np.int16)


class PacedTrack(MediaStreamTrack):
    """An audio track producing 20 ms, 48 kHz mono frames in real time.

    `source()` returns the next 960 samples; pts counts samples from 0 with a time base
    of 1/48000, and each frame is released at start + pts/48000 so the sender paces
    itself the way a microphone would.
    """

    kind = "audio"

    def __init__(self, source) -> None:
        super().__init__()
        self._source = source
        self._pts: Optional[int] = None
        self._start = 0.0

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        loop = asyncio.get_running_loop()
        if self._pts is None:
            self._pts = 0
            self._start = loop.time()
        else:
            self._pts += FRAME_SAMPLES
            wait = self._start + self._pts / SAMPLE_RATE - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
        return mono_frame(self._source(FRAME_SAMPLES), self._pts)


class EchoTrack(MediaStreamTrack):
    """Sends back the frames received on the remote track, re-stamped continuously."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=50)  # 1 s
        self._pts = 0

    def push(self, samples: Optional[np.ndarray]) -> None:
        if self.queue.full():
            self.queue.get_nowait()  # drop the oldest rather than grow latency
        self.queue.put_nowait(samples)

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        samples = await self.queue.get()
        if samples is None:
            raise MediaStreamError
        frame = mono_frame(samples, self._pts)
        self._pts += len(samples)
        return frame


class WavRecorder:
    """Writes received audio as 48 kHz mono 16-bit PCM WAV, header kept valid."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file = open(path, "wb")
        self.data_bytes = 0
        self._write_header()

    def _write_header(self) -> None:
        self.file.seek(0)
        self.file.write(
            struct.pack(
                "<4sI4s4sIHHIIHH4sI",
                b"RIFF", 36 + self.data_bytes, b"WAVE",
                b"fmt ", 16, 1, 1, SAMPLE_RATE, SAMPLE_RATE * 2, 2, 16,
                b"data", self.data_bytes,
            )
        )
        self.file.seek(0, os.SEEK_END)

    def write(self, samples: np.ndarray) -> None:
        if self.file.closed:
            return
        self.file.write(samples.astype("<i2").tobytes())
        self.data_bytes += 2 * len(samples)

    def flush(self) -> None:
        if not self.file.closed:
            self._write_header()
            self.file.flush()

    def close(self) -> None:
        if not self.file.closed:
            self._write_header()
            self.file.close()


# --------------------------------------------------------------------------------------
# One call
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class ChannelLog:
    label: str
    id: Optional[int]
    protocol: str
    opened_by: str  # "remote" or "local"
    opened_at: float
    closed_at: Optional[float] = None
    received_count: int = 0
    received_bytes: int = 0
    received_text: int = 0
    received_binary: int = 0
    sizes: list = dataclasses.field(default_factory=list)
    texts: list = dataclasses.field(default_factory=list)
    sent_count: int = 0
    sent_sizes: list = dataclasses.field(default_factory=list)
    send_errors: list = dataclasses.field(default_factory=list)


class Session:
    """One peer connection answered on one of the routes."""

    def __init__(self, server: "PeerServer", route: str, chat_id: Optional[str] = None) -> None:
        self.server = server
        self.args = server.args
        self.route = route
        self.chat_id = chat_id
        self.id = new_id("")
        self.created = time.monotonic()
        self.created_iso = now_iso()
        self.connected_at: Optional[float] = None
        self.ended_at: Optional[float] = None
        self.end_reason: Optional[str] = None
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.states: list = []  # (t, what, state)
        self.channels: list[ChannelLog] = []
        self.peer_channel = None
        self.echo_track: Optional[EchoTrack] = None
        self.audio_frames_received = 0
        self.audio_samples_received = 0
        self.audio_gaps_filled_samples = 0
        self.received_peak = 0
        self.stats_snapshot: dict = {}
        self.rtp: dict = {"transport_packets": 0, "transport_bytes": 0, "packets": 0,
                          "payload_bytes": 0, "payload_types": {}, "ssrcs": []}
        self.channel_logs: dict = {}  # id(channel) -> ChannelLog
        self.transport_info: dict = {}
        self.tasks: set = set()
        self.offer_sdp = ""
        self.answer_sdp = ""
        self.closing = False
        self.openai: Optional[OpenAIScript] = None
        # openai mode: the voice is the tone, gated by `speaking`.
        self.speaking = False
        self.voice_sine = Sine(self.args.tone_freq, self.args.tone_dbfs)
        # Audio received since the last input_audio_buffer.clear/commit, in samples.
        self.input_samples_since_clear = 0
        self._wire_events()

    # -- helpers --

    def t(self) -> float:
        return round(time.monotonic() - self.created, 3)

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def record_state(self, what: str, state: str) -> None:
        self.states.append({"t": self.t(), "what": what, "state": state})
        log.info("session %s: %s %s", self.id, what, state)

    # -- peer connection events --

    def _wire_events(self) -> None:
        pc = self.pc

        @pc.on("iceconnectionstatechange")
        def _ice() -> None:
            self.record_state("ice", pc.iceConnectionState)

        @pc.on("icegatheringstatechange")
        def _gathering() -> None:
            self.record_state("gathering", pc.iceGatheringState)

        @pc.on("signalingstatechange")
        def _signaling() -> None:
            self.record_state("signaling", pc.signalingState)

        @pc.on("connectionstatechange")
        def _conn() -> None:
            state = pc.connectionState
            self.record_state("connection", state)
            if state == "connected" and self.connected_at is None:
                self.connected_at = time.monotonic()
                self.capture_transport_info()
                self.on_connected()
            elif state in ("failed", "closed") and not self.closing:
                self.spawn(self.server.end_session(self, f"connection {state}"))

        @pc.on("track")
        def _track(track) -> None:
            log.info("session %s: remote %s track", self.id, track.kind)
            if track.kind != "audio":
                return
            mode = self.args.mode
            if mode == "echo":
                self.echo_track = EchoTrack()
                pc.addTrack(self.echo_track)
            elif mode == "tone":
                sine = Sine(self.args.tone_freq, self.args.tone_dbfs)
                pc.addTrack(PacedTrack(sine.next))
            else:
                pc.addTrack(PacedTrack(self.voice_samples))
            self.spawn(self.consume_audio(track))

        @pc.on("datachannel")
        def _datachannel(channel) -> None:
            self.attach_channel(channel, "remote")

    def voice_samples(self, n: int) -> np.ndarray:
        if self.speaking:
            return self.voice_sine.next(n)
        return np.zeros(n, dtype=np.int16)

    def dtls_transport(self):
        for transceiver in self.pc.getTransceivers():
            if transceiver.receiver.transport is not None:
                return transceiver.receiver.transport
        if self.pc.sctp is not None:
            return self.pc.sctp.transport
        return None

    def capture_transport_info(self) -> None:
        """DTLS role, cipher, SRTP profile and the nominated ICE pair (private aiortc
        fields: this is a test tool pinned to one aiortc version)."""
        info: dict = {}
        dtls = self.dtls_transport()
        if dtls is None:
            return
        try:
            info["dtls_role"] = getattr(dtls, "_role", None)
            info["dtls_state"] = dtls.state
            ssl = getattr(dtls, "_ssl", None)
            if ssl is not None:
                info["tls_cipher"] = ssl.get_cipher_name()
                info["tls_version"] = ssl.get_protocol_version_name()
                profile = ssl.get_selected_srtp_profile()
                info["srtp_profile"] = profile.decode() if profile else None
            ice = dtls.transport
            info["ice_role"] = ice.role
            conn = ice._connection
            pairs = []
            for pair in conn._nominated.values():
                local = pair.local_candidate
                remote = pair.remote_candidate
                pairs.append(
                    {
                        "local": {"ip": local.host, "port": local.port, "type": local.type,
                                  "protocol": local.transport},
                        "remote": {"ip": remote.host, "port": remote.port, "type": remote.type,
                                   "protocol": remote.transport},
                    }
                )
            info["selected_pairs"] = pairs
            info["local_candidates"] = [c.to_sdp() for c in conn.local_candidates]
            info["remote_candidates"] = [c.to_sdp() for c in conn.remote_candidates]
        except Exception as exc:  # keep the report even if aiortc internals moved
            info["error"] = repr(exc)
        self.transport_info.update(info)

    def on_connected(self) -> None:
        want_peer_channel = self.args.peer_channel
        if want_peer_channel is None:
            want_peer_channel = self.args.mode != "openai"
        if want_peer_channel and self.pc.sctp is not None:
            channel = self.pc.createDataChannel("peer-events")
            self.peer_channel = channel
            self.attach_channel(channel, "local")

            @channel.on("open")
            def _open() -> None:
                self.send(channel, json.dumps({"type": "hello", "peer": "aiortc",
                                               "mode": self.args.mode}))
                self.send(channel, self.big_text())
                if self.args.close_channel_after is not None:
                    self.spawn(self.close_channel_later(channel, self.args.close_channel_after))

    def big_text(self) -> str:
        size = self.args.big_message_size
        remote_max = getattr(self.pc.sctp, "_remote_max_message_size", 0) if self.pc.sctp else 0
        if remote_max and size > remote_max:
            log.warning("session %s: remote max-message-size %d < %d, sending %d",
                        self.id, remote_max, size, remote_max)
            size = remote_max
        # A recognisable, checkable pattern: "big:" + digits cycling.
        body = ("0123456789" * (size // 10 + 1))
        return ("big:" + body)[:size]

    async def close_channel_later(self, channel, seconds: float) -> None:
        await asyncio.sleep(seconds)
        log.info("session %s: closing channel %s", self.id, channel.label)
        channel.close()

    # -- data channels --

    def channel_log(self, channel) -> ChannelLog:
        entry = self.channel_logs.get(id(channel))
        if entry is None:
            entry = ChannelLog(channel.label, channel.id, channel.protocol, "?", self.t())
            self.channels.append(entry)
            self.channel_logs[id(channel)] = entry
        if entry.id is None:
            entry.id = channel.id  # a channel we open gets its stream id later
        return entry

    def attach_channel(self, channel, opened_by: str) -> None:
        entry = ChannelLog(channel.label, channel.id, channel.protocol, opened_by, self.t())
        self.channels.append(entry)
        self.channel_logs[id(channel)] = entry
        log.info("session %s: data channel %r (%s, id %s)", self.id, channel.label,
                 opened_by, channel.id)

        @channel.on("message")
        def _message(message) -> None:
            self.channel_log(channel)
            size = len(message.encode("utf8")) if isinstance(message, str) else len(message)
            entry.received_count += 1
            entry.received_bytes += size
            if len(entry.sizes) < MAX_LOGGED_MESSAGES:
                entry.sizes.append(size)
            if isinstance(message, str):
                entry.received_text += 1
                if len(entry.texts) < MAX_LOGGED_MESSAGES:
                    entry.texts.append(truncate(message))
            else:
                entry.received_binary += 1
            if self.args.mode == "openai" and channel.label == "oai-events":
                if self.openai is not None:
                    self.openai.handle(message)
            elif self.args.mode == "echo" and opened_by == "remote":
                self.send(channel, message)

        @channel.on("close")
        def _close() -> None:
            self.channel_log(channel)
            entry.closed_at = self.t()
            log.info("session %s: data channel %r closed", self.id, channel.label)

        if self.args.mode == "openai" and channel.label == "oai-events" and opened_by == "remote":
            self.openai = OpenAIScript(self, channel)
            self.openai.start()

    def send(self, channel, message) -> None:
        entry = self.channel_log(channel)
        size = len(message.encode("utf8")) if isinstance(message, str) else len(message)
        try:
            channel.send(message)
            entry.sent_count += 1
            if len(entry.sent_sizes) < MAX_LOGGED_MESSAGES:
                entry.sent_sizes.append(size)
        except Exception as exc:
            entry.send_errors.append(repr(exc))
            log.warning("session %s: send on %r failed: %r", self.id, channel.label, exc)

    # -- audio --

    async def consume_audio(self, track) -> None:
        """Reads every decoded frame: counts it, records it, feeds echo and the openai
        input buffer. Gaps in the RTP timeline (DTX, loss) become silence in the WAV so
        its time axis follows the sender's clock."""
        expected_pts: Optional[int] = None
        recorder = self.server.recorder
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                break
            samples = frame_to_mono(frame)
            if frame.sample_rate != SAMPLE_RATE:
                log.warning("unexpected decoded sample rate %d", frame.sample_rate)
            self.audio_frames_received += 1
            self.audio_samples_received += len(samples)
            self.input_samples_since_clear += len(samples)
            if len(samples):
                self.received_peak = max(self.received_peak, int(np.abs(samples.astype(np.int32)).max()))
            if frame.pts is not None:
                if expected_pts is not None and frame.pts > expected_pts:
                    gap = frame.pts - expected_pts
                    if gap <= 10 * SAMPLE_RATE:
                        self.audio_gaps_filled_samples += gap
                        if recorder:
                            recorder.write(np.zeros(gap, dtype=np.int16))
                expected_pts = frame.pts + len(samples)
            if recorder:
                recorder.write(samples)
            if self.echo_track is not None:
                self.echo_track.push(samples)

    # -- lifecycle --

    async def answer(self, offer_sdp: str) -> str:
        self.offer_sdp = offer_sdp
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        self.instrument()
        ufrag = None
        if self.route == "openai" and not self.args.plain_answer:
            ufrag = self.use_openai_ufrag()
        answer = await self.pc.createAnswer()
        # aiortc gathers all candidates inside setLocalDescription, so the answer's SDP
        # carries them (and a=end-of-candidates).
        await self.pc.setLocalDescription(answer)
        self.answer_sdp = self.pc.localDescription.sdp
        if ufrag is not None:
            self.answer_sdp = openai_shaped_answer(self.answer_sdp, ufrag)
        return self.answer_sdp

    def use_openai_ufrag(self) -> str:
        """OpenAI's /calls answers carry an ICE ufrag with '/' in it (an ice-char, RFC
        8839 section 5.4). aioice keeps the local ufrag in Connection._local_username
        (read-only property local_username, set in __init__) and uses it both for
        RTCIceGatherer.getLocalParameters (the answer's a=ice-ufrag) and to check the
        USERNAME of every incoming STUN check. Setting it here, after
        setRemoteDescription made the transports and before createAnswer reads them, makes
        the connectivity checks really run with this ufrag."""
        ufrag = secrets.token_hex(6) + "/" + secrets.token_hex(5)
        aioice.ice.validate_username(ufrag)
        transports = []
        for transceiver in self.pc.getTransceivers():
            if transceiver.receiver.transport is not None:
                transports.append(transceiver.receiver.transport.transport)
        if self.pc.sctp is not None:
            transports.append(self.pc.sctp.transport.transport)
        for ice in {id(t): t for t in transports}.values():
            ice._connection._local_username = ufrag
        return ufrag

    def instrument(self) -> None:
        """Counts RTP as it arrives (aiortc's stats have no inbound byte count): every
        decrypted RTP packet on the transport, and those routed to a receiver. A packet
        aiortc cannot route (unknown SSRC, no mid, unknown payload type) is dropped
        silently by aiortc, so the difference is worth a line in the report."""
        dtls = self.dtls_transport()
        if dtls is None or getattr(dtls, "_linnet_counted", False):
            return
        dtls._linnet_counted = True
        original_data = dtls._handle_rtp_data

        async def handle_rtp_data(data: bytes, arrival_time_ms: int) -> None:
            self.rtp["transport_packets"] += 1
            self.rtp["transport_bytes"] += len(data)
            await original_data(data, arrival_time_ms)

        dtls._handle_rtp_data = handle_rtp_data
        for transceiver in self.pc.getTransceivers():
            receiver = transceiver.receiver
            original_packet = receiver._handle_rtp_packet

            async def handle_rtp_packet(packet, arrival_time_ms: int, _orig=original_packet) -> None:
                self.rtp["packets"] += 1
                self.rtp["payload_bytes"] += len(packet.payload)
                self.rtp["payload_types"][str(packet.payload_type)] = \
                    self.rtp["payload_types"].get(str(packet.payload_type), 0) + 1
                if packet.ssrc not in self.rtp["ssrcs"]:
                    self.rtp["ssrcs"].append(packet.ssrc)
                await _orig(packet, arrival_time_ms=arrival_time_ms)

            receiver._handle_rtp_packet = handle_rtp_packet

    async def snapshot_stats(self) -> None:
        try:
            report = await self.pc.getStats()
        except Exception as exc:
            self.stats_snapshot = {"error": repr(exc)}
            return
        totals = {"rtp_packets_received": 0, "rtp_packets_sent": 0, "rtp_bytes_sent": 0}
        raw = {}
        for key, stat in report.items():
            d = {k: (v.isoformat() if isinstance(v, datetime.datetime) else v)
                 for k, v in dataclasses.asdict(stat).items()}
            raw[key] = d
            if stat.type == "inbound-rtp":
                totals["rtp_packets_received"] += d.get("packetsReceived") or 0
            elif stat.type == "outbound-rtp":
                totals["rtp_packets_sent"] += d.get("packetsSent") or 0
                totals["rtp_bytes_sent"] += d.get("bytesSent") or 0
        self.stats_snapshot = {**totals, "raw": raw}

    def call_seconds(self) -> float:
        if self.connected_at is None:
            return 0.0
        end = self.ended_at if self.ended_at is not None else time.monotonic()
        return round(end - self.connected_at, 3)

    async def close(self, reason: str) -> None:
        if self.closing:
            return
        self.closing = True
        self.end_reason = reason
        self.ended_at = time.monotonic()
        if self.connected_at is not None:
            self.capture_transport_info()
        await self.snapshot_stats()
        if self.openai is not None:
            self.openai.stop()
        if self.echo_track is not None:
            self.echo_track.push(None)  # wakes the sender so it stops
        await self.pc.close()
        for task in list(self.tasks):
            if task is not asyncio.current_task():
                task.cancel()
        log.info("session %s closed (%s) after %.3f s", self.id, reason, self.call_seconds())

    def to_report(self) -> dict:
        out = {
            "id": self.id,
            "route": self.route,
            "chat_id": self.chat_id,
            "created": self.created_iso,
            "end_reason": self.end_reason,
            "call_seconds": self.call_seconds(),
            "states": self.states,
            "connection_state": self.pc.connectionState,
            "ice_connection_state": self.pc.iceConnectionState,
            **self.transport_info,
            **{k: v for k, v in self.stats_snapshot.items() if k != "raw"},
            # Payload bytes of RTP routed to the audio receiver (bytesSent counts the
            # same way); the transport_* figures include RTP aiortc could not route.
            "rtp_bytes_received": self.rtp["payload_bytes"],
            "rtp_routed_packets": self.rtp["packets"],
            "rtp_transport_packets_received": self.rtp["transport_packets"],
            "rtp_transport_bytes_received": self.rtp["transport_bytes"],
            "rtp_payload_types_received": self.rtp["payload_types"],
            "rtp_ssrcs_received": self.rtp["ssrcs"],
            "audio_frames_received": self.audio_frames_received,
            "audio_seconds_received": round(self.audio_samples_received / SAMPLE_RATE, 3),
            "audio_gap_seconds_filled": round(self.audio_gaps_filled_samples / SAMPLE_RATE, 3),
            "audio_peak_received": self.received_peak,
            "data_channels": [dataclasses.asdict(c) for c in self.channels],
            "data_channel_labels": [c.label for c in self.channels],
            "offer_sdp": self.offer_sdp,
            "answer_sdp": self.answer_sdp,
            "stats": self.stats_snapshot.get("raw", {}),
        }
        if self.openai is not None:
            out["openai_events_received"] = self.openai.received
            out["openai_truncates"] = self.openai.truncates
            out["openai_tool_outputs"] = self.openai.tool_outputs
            out["openai_usage_sent"] = self.openai.usage_sent
            out["openai_tools_offered"] = [t.get("name") for t in self.openai.session_obj.get("tools", []) if isinstance(t, dict)]
            out["openai_events_sent"] = self.openai.sent_types
            out["openai_events_sent_log"] = self.openai.sent_log
        return out


def openai_shaped_answer(sdp: str, ufrag: str) -> str:
    """aiortc's answer rewritten to the shape of OpenAI's published /calls answer (see
    Tests/SDPTests/Fixtures/openai-shaped-answer.sdp): one session-level a=fingerprint
    instead of one per media section (RFC 8122 section 5 allows either), a=setup:active,
    and after each UDP host candidate a TCP passive one on port 443 (RFC 6544), both
    with OpenAI's `ufrag` candidate extension. aiortc's real fingerprint and UDP
    candidates are kept, so the call still works; nothing listens on the TCP one, which
    a client without ICE-TCP must skip. a=end-of-candidates is dropped (OpenAI sends
    none)."""
    lines = [l for l in sdp.replace("\r\n", "\n").split("\n") if l]
    fingerprints = [l for l in lines if l.startswith("a=fingerprint:")]
    session, media, current = [], [], None
    for line in lines:
        if line.startswith("m="):
            current = [line]
            media.append(current)
        elif current is None:
            session.append(line)
        else:
            current.append(line)
    if fingerprints:
        at = next((i for i, l in enumerate(session) if l.startswith("a=group:")), len(session))
        session.insert(at, fingerprints[0])
    out = list(session)
    for section in media:
        for line in section:
            if line.startswith("a=fingerprint:") or line == "a=end-of-candidates":
                continue
            if line.startswith("a=setup:"):
                line = "a=setup:active"
            if line.startswith("a=candidate:"):
                parts = line[len("a=candidate:"):].split(" ")
                if len(parts) >= 8 and parts[2].lower() == "udp" and parts[6] == "typ":
                    out.append(line + " ufrag " + ufrag)
                    # priority: type preference 105 (host, TCP passive), as OpenAI's.
                    tcp = (f"a=candidate:{int(parts[0]) ^ 1 if parts[0].isdigit() else parts[0] + 't'} "
                           f"{parts[1]} tcp 1671430143 {parts[4]} 443 typ host tcptype passive ufrag {ufrag}")
                    out.append(tcp)
                    continue
            out.append(line)
    return "\r\n".join(out) + "\r\n"


# --------------------------------------------------------------------------------------
# Scripted OpenAI Realtime server on oai-events
# --------------------------------------------------------------------------------------


def deep_merge(base: dict, update: dict) -> dict:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = value
    return base


# The GA `session.update` schema (Realtime API reference, `RealtimeSessionCreateRequest`),
# as far as a client may send it: a dict maps each allowed key to its sub-schema, a
# tuple lists the allowed values, a type the allowed type, None any value. The real
# service refuses unknown parameters; so does this stand-in.
_TURN_DETECTION = {
    "type": ("server_vad", "semantic_vad"), "threshold": float, "prefix_padding_ms": int,
    "silence_duration_ms": int, "idle_timeout_ms": None, "create_response": bool,
    "interrupt_response": bool, "eagerness": ("low", "medium", "high", "auto"),
}
# Fields only one kind of voice detection takes.
_SERVER_VAD_ONLY = ("threshold", "prefix_padding_ms", "silence_duration_ms", "idle_timeout_ms")
_SEMANTIC_VAD_ONLY = ("eagerness",)
SESSION_SCHEMA = {
    "type": ("realtime",), "model": str, "output_modalities": list, "instructions": str,
    "tools": list, "tool_choice": None, "max_output_tokens": None, "tracing": None,
    "prompt": None, "include": None, "truncation": None,
    "audio": {
        "input": {
            "format": {"type": str, "rate": int},
            "transcription": {"model": str, "language": str, "prompt": str},
            "noise_reduction": {"type": ("near_field", "far_field")},
            "turn_detection": _TURN_DETECTION,
        },
        "output": {"format": {"type": str, "rate": int}, "voice": str, "speed": float},
    },
}


def schema_error(value, schema, path: str) -> Optional[tuple]:
    """(code, message, param) for the first thing `value` does wrong, or None."""
    if schema is None:
        return None
    if isinstance(schema, dict):
        if value is None and path.rsplit(".", 1)[-1] in ("turn_detection", "noise_reduction", "transcription"):
            return None  # null turns these off
        if not isinstance(value, dict):
            return ("invalid_type", f"Invalid type for '{path}': expected an object.", path)
        for key, sub in value.items():
            if key not in schema:
                return ("unknown_parameter", f"Unknown parameter: '{path}.{key}'.", f"{path}.{key}")
            err = schema_error(sub, schema[key], f"{path}.{key}")
            if err:
                return err
        if schema is _TURN_DETECTION:
            kind = value.get("type", "server_vad")
            wrong = _SEMANTIC_VAD_ONLY if kind == "server_vad" else _SERVER_VAD_ONLY
            for key in wrong:
                if key in value:
                    return ("unknown_parameter", f"Unknown parameter: '{path}.{key}' (not for {kind}).", f"{path}.{key}")
        return None
    if isinstance(schema, tuple):
        if value not in schema:
            return ("invalid_value", f"Invalid value: '{value}'. Supported values are: {', '.join(map(repr, schema))}.", path)
        return None
    if schema is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif schema is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, schema)
    return None if ok else ("invalid_type", f"Invalid type for '{path}'.", path)


class OpenAIScript:
    """Plays the server side of the Realtime data channel protocol, scripted.

    Events follow the GA Realtime API names (`response.output_audio_transcript.*`);
    --legacy-events switches to the older `response.audio_transcript.*` names."""

    MIN_COMMIT_SAMPLES = SAMPLE_RATE // 10  # 100 ms, as the real server requires

    def __init__(self, session: Session, channel) -> None:
        self.session = session
        self.args = session.args
        self.channel = channel
        self.received: list = []
        self.sent_types: list = []
        self.sent_log: list = []  # {t, type, status (response.*), code (error)}
        self.last_item_id: Optional[str] = None
        self.response_task: Optional[asyncio.Task] = None
        self.response_id: Optional[str] = None
        self.response_done_sent = False
        self.cancelling = False  # --cancel-done-after: a cancelled response not yet done
        # Assistant audio items: id → when their voice started (loop time); and the
        # truncates accepted (what the client said was heard, what had been sent).
        self.audio_items: dict = {}
        self.truncates: list = []
        # --tool-call: the function call the first response makes, its call id, and the
        # function_call_output items the client sent (the model's next turn reads them).
        self.tool_call_id: Optional[str] = None
        self.tool_outputs: list = []
        self.usage_sent: list = []
        self.session_obj = {
            "type": "realtime",
            "object": "realtime.session",
            "id": new_id("sess_"),
            "model": "gpt-realtime",
            "output_modalities": ["audio"],
            "instructions": "",
            "tools": [],
            "tool_choice": "auto",
            "max_output_tokens": "inf",
            "tracing": None,
            "prompt": None,
            "expires_at": int(time.time()) + 3600,
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 24000},
                    "transcription": None,
                    "noise_reduction": None,
                    "turn_detection": {"type": "server_vad", "threshold": 0.5,
                                       "prefix_padding_ms": 300, "silence_duration_ms": 200,
                                       "idle_timeout_ms": None, "create_response": True,
                                       "interrupt_response": True},
                },
                "output": {"format": {"type": "audio/pcm", "rate": 24000},
                           "voice": "alloy", "speed": 1.0},
            },
            "include": None,
        }

    def start(self) -> None:
        # The channel the offerer opened is already open when aiortc reports it.
        self.emit({"type": "session.created", "session": self.session_obj})

    def stop(self) -> None:
        if self.response_task is not None:
            self.response_task.cancel()
        self.session.speaking = False

    def emit(self, event: dict) -> None:
        event = {"type": event["type"], "event_id": new_id("event_"),
                 **{k: v for k, v in event.items() if k != "type"}}
        self.sent_types.append(event["type"])
        response = event.get("response") if isinstance(event.get("response"), dict) else {}
        self.sent_log.append({"t": self.session.t(), "type": event["type"],
                              "status": response.get("status"),
                              "code": (event.get("error") or {}).get("code"),
                              "seconds": (event.get("usage") or {}).get("seconds")})
        if self.channel.readyState == "open":
            self.session.send(self.channel, json.dumps(event))

    def error(self, code: str, message: str, client_event_id: Optional[str],
              param: Optional[str] = None) -> None:
        self.emit({"type": "error", "error": {"type": "invalid_request_error", "code": code,
                                              "message": message, "param": param,
                                              "event_id": client_event_id}})

    def handle(self, message) -> None:
        entry: dict = {"t": self.session.t()}
        if not isinstance(message, str):
            entry.update({"type": None, "binary_bytes": len(message)})
            self.received.append(entry)
            self.error("invalid_json", "Binary messages are not supported.", None)
            return
        try:
            event = json.loads(message)
            if not isinstance(event, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            entry.update({"type": None, "raw": truncate(message)})
            self.received.append(entry)
            self.error("invalid_json", f"Invalid JSON: {exc}", None)
            return
        kind = event.get("type")
        entry.update({"type": kind, "event": json.loads(truncate(message, 4000))
                      if len(message) <= 4000 else truncate(message)})
        self.received.append(entry)
        log.info("session %s: oai-events <- %s", self.session.id, kind)
        client_id = event.get("event_id")
        handler = {
            "session.update": self.on_session_update,
            "input_audio_buffer.clear": self.on_clear,
            "input_audio_buffer.commit": self.on_commit,
            "response.create": self.on_response_create,
            "response.cancel": self.on_response_cancel,
            "output_audio_buffer.clear": self.on_output_clear,
            "conversation.item.create": self.on_item_create,
            "conversation.item.truncate": self.on_item_truncate,
        }.get(kind)
        if handler is None:
            self.error("invalid_value", f"Invalid value: '{kind}'. Unsupported event type.",
                       client_id, "type")
            return
        handler(event)

    def on_session_update(self, event: dict) -> None:
        update = event.get("session")
        if not isinstance(update, dict):
            self.error("missing_required_parameter", "Missing required parameter: 'session'.",
                       event.get("event_id"), "session")
            return
        err = schema_error(update, SESSION_SCHEMA, "session")
        if err:
            self.error(err[0], err[1], event.get("event_id"), err[2])
            return
        voice = update.get("audio", {}).get("output", {}).get("voice") if isinstance(update.get("audio"), dict) else None
        current = self.session_obj["audio"]["output"]["voice"]
        if voice is not None and voice != current and "response.created" in self.sent_types:
            # As the service: the voice is fixed once the assistant has spoken.
            self.error("cannot_update_voice", "Cannot update a conversation's voice if assistant audio is present.",
                       event.get("event_id"), "session.audio.output.voice")
            return
        deep_merge(self.session_obj, update)
        self.emit({"type": "session.updated", "session": self.session_obj})

    def on_clear(self, event: dict) -> None:
        self.session.input_samples_since_clear = 0
        self.emit({"type": "input_audio_buffer.cleared"})

    def on_commit(self, event: dict) -> None:
        samples = self.session.input_samples_since_clear
        if samples < self.MIN_COMMIT_SAMPLES:
            ms = samples * 1000.0 / SAMPLE_RATE
            self.error(
                "input_audio_buffer_commit_empty",
                "Error committing input audio buffer: buffer too small. Expected at least "
                f"100ms of audio, but buffer only has {ms:.2f}ms of audio.",
                event.get("event_id"),
            )
            return
        self.session.input_samples_since_clear = 0
        item_id = new_id("item_")
        self.emit({"type": "input_audio_buffer.committed",
                   "previous_item_id": self.last_item_id, "item_id": item_id})
        self.last_item_id = item_id
        completed = {"type": "conversation.item.input_audio_transcription.completed",
                     "item_id": item_id, "content_index": 0,
                     "transcript": self.args.transcript,
                     "usage": {"type": "duration", "seconds": round(samples / SAMPLE_RATE, 3)}}
        if self.args.late_transcript:
            # --late-transcript S: transcription runs beside the response (OpenAI's
            # guide: completions may arrive in any order), so the user's transcript can
            # come after the assistant's answer to it.
            self.session.spawn(self.emit_later(completed, self.args.late_transcript))
        else:
            self.emit(completed)

    async def emit_later(self, event: dict, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.emit(event)

    def on_item_create(self, event: dict) -> None:
        item = event.get("item") if isinstance(event.get("item"), dict) else {}
        if item.get("type") == "function_call_output":
            # As the service: the output must answer a call this conversation made.
            if item.get("call_id") != self.tool_call_id or not isinstance(item.get("output"), str):
                self.error("invalid_value", f"Invalid value: '{item.get('call_id')}'. No such function call.",
                           event.get("event_id"), "item.call_id")
                return
            self.tool_outputs.append({"call_id": item["call_id"], "output": item["output"]})
        item = {"id": item.get("id") or new_id("item_"), **item}
        self.emit({"type": "conversation.item.added",
                   "previous_item_id": self.last_item_id, "item": item})
        self.last_item_id = item["id"]

    def on_item_truncate(self, event: dict) -> None:
        # As the service: the item must be an assistant message this session produced,
        # and audio_end_ms a whole number of ms no later than the audio it has had time
        # to play (the voice is sent in real time from output_audio_buffer.started).
        item_id = event.get("item_id")
        started = self.audio_items.get(item_id) if isinstance(item_id, str) else None
        end = event.get("audio_end_ms")
        if started is None:
            self.error("invalid_value", f"Invalid value: '{item_id}'. No such item.", event.get("event_id"), "item_id")
            return
        if event.get("content_index") != 0:
            self.error("invalid_value", "Invalid content_index.", event.get("event_id"), "content_index")
            return
        elapsed = int((asyncio.get_running_loop().time() - started) * 1000)
        if not isinstance(end, int) or isinstance(end, bool) or end < 0 or end > elapsed + 20:
            self.error("invalid_value", f"audio_end_ms {end!r} is outside the item's audio ({elapsed} ms sent).",
                       event.get("event_id"), "audio_end_ms")
            return
        self.truncates.append({"item_id": item_id, "audio_end_ms": end, "sent_ms": elapsed})
        self.emit({"type": "conversation.item.truncated", "item_id": item_id,
                   "content_index": 0, "audio_end_ms": end})

    def on_response_create(self, event: dict) -> None:
        if self.response_task is not None and not self.response_task.done():
            self.error("conversation_already_has_active_response",
                       "Conversation already has an active response in progress.",
                       event.get("event_id"))
            return
        self.response_id = new_id("resp_")
        self.response_done_sent = False
        self.response_task = self.session.spawn(self.respond(self.response_id))

    def transcript_names(self) -> tuple[str, str]:
        if self.args.legacy_events:
            return "response.audio_transcript.delta", "response.audio_transcript.done"
        return "response.output_audio_transcript.delta", "response.output_audio_transcript.done"

    def response_obj(self, response_id: str, status: str, item_id: str, transcript: str) -> dict:
        return {"object": "realtime.response", "id": response_id, "status": status,
                "status_details": None if status == "completed" else
                {"type": status, "reason": "client_cancelled"},
                "output": [{"id": item_id, "type": "message", "role": "assistant",
                            "status": status if status != "completed" else "completed",
                            "content": [{"type": "output_audio", "transcript": transcript}]}],
                "conversation_id": None, "output_modalities": ["audio"],
                "usage": self.usage(transcript)}

    def usage(self, transcript: str) -> dict:
        # A response's usage as the GA API reports it (input and output tokens by
        # modality, the cached part of the input), made up from what this turn carried
        # and kept in the report, so a test can add up what Linnet should have counted.
        n = len(self.usage_sent)
        audio_in, text_in, cached = 50 + 7 * n, 120 + n, 64 if n else 0
        text_out, audio_out = len(transcript.split()), 25 * len(transcript.split())
        u = {"total_tokens": audio_in + text_in + text_out + audio_out,
             "input_tokens": audio_in + text_in, "output_tokens": text_out + audio_out,
             "input_token_details": {"text_tokens": text_in, "audio_tokens": audio_in, "image_tokens": 0,
                                     "cached_tokens": cached,
                                     "cached_tokens_details": {"text_tokens": cached, "audio_tokens": 0, "image_tokens": 0}},
                                     "output_token_details": {"text_tokens": text_out, "audio_tokens": audio_out}}
        self.usage_sent.append(u)
        return u

    async def call_tool(self, response_id: str) -> None:
        # --tool-call NAME:ARGS: the model's first answer is a function call (GA events:
        # the item added, its arguments streamed, the item done, the response done).
        name, _, arguments = self.args.tool_call.partition(":")
        item_id, call_id = new_id("item_"), new_id("call_")
        self.tool_call_id = call_id
        item = {"id": item_id, "object": "realtime.item", "type": "function_call", "status": "in_progress",
                "name": name, "call_id": call_id, "arguments": ""}
        self.emit({"type": "response.created", "response": {"object": "realtime.response", "id": response_id,
                                                            "status": "in_progress", "output": []}})
        self.emit({"type": "response.output_item.added", "response_id": response_id, "output_index": 0, "item": item})
        for piece in (arguments[:len(arguments) // 2], arguments[len(arguments) // 2:]):
            self.emit({"type": "response.function_call_arguments.delta", "response_id": response_id, "item_id": item_id,
                       "output_index": 0, "call_id": call_id, "delta": piece})
            await asyncio.sleep(0.02)
        self.emit({"type": "response.function_call_arguments.done", "response_id": response_id, "item_id": item_id,
                   "output_index": 0, "call_id": call_id, "name": name, "arguments": arguments})
        done = {**item, "status": "completed", "arguments": arguments}
        self.emit({"type": "response.output_item.done", "response_id": response_id, "output_index": 0, "item": done})
        self.emit({"type": "response.done", "response": {"object": "realtime.response", "id": response_id,
                                                         "status": "completed", "output": [done], "usage": None}})
        self.response_done_sent = True

    async def respond(self, response_id: str) -> None:
        if self.args.tool_call and self.tool_call_id is None:
            await self.call_tool(response_id)
            return
        reply = self.args.reply
        if self.tool_outputs:
            # The answer after a call reads its output, as a model's would.
            reply = f"{reply} The tool said: {self.tool_outputs[-1]['output']}"

        item_id = new_id("item_")
        delta_name, done_name = self.transcript_names()
        spoken = ""
        try:
            self.emit({"type": "response.created",
                       "response": {"object": "realtime.response", "id": response_id,
                                    "status": "in_progress", "output": []}})
            self.emit({"type": "response.output_item.added", "response_id": response_id, "output_index": 0,
                       "item": {"id": item_id, "object": "realtime.item", "type": "message", "status": "in_progress",
                                "role": "assistant", "content": []}})
            self.session.speaking = True
            self.emit({"type": "output_audio_buffer.started", "response_id": response_id})
            start = asyncio.get_running_loop().time()
            self.audio_items[item_id] = start
            words = reply.split(" ")
            for index, word in enumerate(words):
                delta = word if index == len(words) - 1 else word + " "
                spoken += delta
                self.emit({"type": delta_name, "response_id": response_id, "item_id": item_id,
                           "output_index": 0, "content_index": 0, "delta": delta})
                await asyncio.sleep(0.05)
            self.emit({"type": done_name, "response_id": response_id, "item_id": item_id,
                       "output_index": 0, "content_index": 0, "transcript": reply})
            self.emit({"type": "response.done",
                       "response": self.response_obj(response_id, "completed", item_id, reply)})
            self.response_done_sent = True
            # The voice keeps playing after generation is done, as with the real server:
            # output_audio_buffer.stopped marks the end of playback.
            remaining = start + self.args.voice_seconds - asyncio.get_running_loop().time()
            if remaining > 0:
                await asyncio.sleep(remaining)
            self.session.speaking = False
            self.emit({"type": "output_audio_buffer.stopped", "response_id": response_id})
        except asyncio.CancelledError:
            self.session.speaking = False
            raise

    def on_response_cancel(self, event: dict) -> None:
        task = self.response_task
        if task is None or task.done():
            self.error("response_cancel_not_active",
                       "Cancellation failed: no active response found.", event.get("event_id"))
            return
        was_speaking = self.session.speaking
        task.cancel()
        self.session.speaking = False
        if not self.response_done_sent and self.args.cancel_done_after:
            # --cancel-done-after S: as the service may, the cancelled response stays
            # active until its response.done, S seconds later; a response.create
            # meanwhile is refused with conversation_already_has_active_response.
            self.response_task = self.session.spawn(self.finish_cancel(self.response_id))
            if was_speaking:
                self.emit({"type": "output_audio_buffer.stopped", "response_id": self.response_id})
            return
        if not self.response_done_sent:
            self.emit({"type": "response.done",
                       "response": self.response_obj(self.response_id, "cancelled",
                                                     new_id("item_"), "")})
            self.response_done_sent = True
        if was_speaking:
            self.emit({"type": "output_audio_buffer.stopped", "response_id": self.response_id})

    async def finish_cancel(self, response_id: str) -> None:
        self.cancelling = True
        try:
            await asyncio.sleep(self.args.cancel_done_after)
            self.emit({"type": "response.done",
                       "response": self.response_obj(response_id, "cancelled", new_id("item_"), "")})
            self.response_done_sent = True
        finally:
            self.cancelling = False

    def on_output_clear(self, event: dict) -> None:
        self.session.speaking = False
        # Clearing the audio does not end a response whose cancel is still under way.
        if self.response_task is not None and not self.response_task.done() and not self.cancelling:
            self.response_task.cancel()
        self.emit({"type": "output_audio_buffer.cleared", "response_id": self.response_id})


# --------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------


class HTTPError(Exception):
    pass


class Request:
    def __init__(self, method: str, target: str, version: str, headers: dict, body: bytes):
        self.method = method
        self.target = target
        self.path = target.split("?", 1)[0]
        self.version = version
        self.headers = headers  # lower-case names
        self.body = body


class Response:
    def __init__(self, status: int, body: bytes = b"", content_type: Optional[str] = None,
                 headers: Optional[dict] = None):
        self.status = status
        self.body = body
        self.headers = dict(headers or {})
        if content_type:
            self.headers["Content-Type"] = content_type


REASONS = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request",
           401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           413: "Payload Too Large", 415: "Unsupported Media Type",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024


async def read_request(reader: asyncio.StreamReader) -> Optional[Request]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise HTTPError("truncated request head")
        return None
    except asyncio.LimitOverrunError:
        raise HTTPError("request head too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HTTPError(f"bad request line {lines[0]!r}")
    headers: dict = {}
    for line in lines[1:]:
        if not line:
            continue
        if ":" not in line:
            raise HTTPError(f"bad header line {line!r}")
        name, value = line.split(":", 1)
        name = name.strip().lower()
        value = value.strip()
        headers[name] = headers[name] + ", " + value if name in headers else value
    body = b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        total = 0
        while True:
            size_line = (await reader.readuntil(b"\r\n")).decode("latin-1")
            size = int(size_line.split(";", 1)[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                break
            total += size
            if total > MAX_BODY_BYTES:
                raise HTTPError("body too large")
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(chunks)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        if length > MAX_BODY_BYTES:
            raise HTTPError("body too large")
        body = await reader.readexactly(length)
    return Request(parts[0], parts[1], parts[2], headers, body)


def encode_response(response: Response, close: bool) -> bytes:
    reason = REASONS.get(response.status, "Status")
    headers = {"Server": "linnet-interop-peer (aiortc)", **response.headers,
               "Content-Length": str(len(response.body))}
    if close:
        headers["Connection"] = "close"
    head = f"HTTP/1.1 {response.status} {reason}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode("latin-1") + response.body


def json_response(status: int, obj: Any, headers: Optional[dict] = None) -> Response:
    return Response(status, json.dumps(obj).encode(), "application/json", headers)


# --------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------


class PeerServer:
    def __init__(self, args) -> None:
        self.args = args
        self.sessions: dict[str, Session] = {}
        self.ended: list[Session] = []
        self.http_log: list = []
        self.offers_seen = 0
        self.ephemeral_keys: set = set()
        self.started = time.monotonic()
        self.started_iso = now_iso()
        self.recorder = WavRecorder(args.record) if args.record else None
        self.stop_event = asyncio.Event()
        self.exit_reason: Optional[str] = None
        self.port: Optional[int] = None

    # -- report --

    def write_report(self) -> None:
        if self.recorder:
            self.recorder.flush()
        if not self.args.report:
            return
        all_sessions = self.ended + [s for s in self.sessions.values() if s not in self.ended]
        sessions = [s.to_report() for s in all_sessions]
        report = {
            "peer": "aiortc",
            "aiortc_version": aiortc_version(),
            "mode": self.args.mode,
            "listen": f"{self.args.host}:{self.port}",
            "started": self.started_iso,
            "written": now_iso(),
            "exit_reason": self.exit_reason,
            "uptime_seconds": round(time.monotonic() - self.started, 3),
            "offers": self.offers_seen,
            "http": self.http_log,
            "record": {"path": self.args.record,
                       "seconds": round(self.recorder.data_bytes / 2 / SAMPLE_RATE, 3)}
            if self.recorder else None,
            "sessions": sessions,
            # The last call's main facts at top level, for short test assertions.
            "last": {k: sessions[-1].get(k) for k in (
                "id", "route", "call_seconds", "connection_state", "dtls_role", "srtp_profile",
                "tls_cipher", "selected_pairs", "rtp_packets_received", "rtp_bytes_received",
                "rtp_packets_sent", "rtp_bytes_sent", "data_channel_labels",
                "openai_events_received")} if sessions else None,
        }
        tmp = self.args.report + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1, default=str)
        os.replace(tmp, self.args.report)

    # -- sessions --

    async def end_session(self, session: Session, reason: str) -> None:
        if session.closing:
            return
        await session.close(reason)
        self.sessions.pop(session.id, None)
        if session not in self.ended:
            self.ended.append(session)
        self.write_report()
        if self.args.once and not self.stop_event.is_set():
            self.exit_reason = f"once: {reason}"
            self.stop_event.set()

    async def new_session(self, route: str, offer: str, chat_id: Optional[str] = None):
        self.offers_seen += 1
        if "\nm=" not in offer.replace("\r\n", "\n"):
            # aiortc would answer an offer without media sections; a provider does not.
            return None, "the offer has no media section"
        session = Session(self, route, chat_id)
        try:
            answer = await session.answer(offer)
        except Exception as exc:
            log.warning("offer rejected: %r", exc)
            await session.pc.close()
            return None, str(exc) or exc.__class__.__name__
        self.sessions[session.id] = session
        log.info("session %s: answered on %s", session.id, route)
        return session, answer

    # -- HTTP handling --

    async def handle_connection(self, reader, writer) -> None:
        peer = writer.get_extra_info("peername")
        try:
            while True:
                try:
                    request = await read_request(reader)
                except (HTTPError, ValueError, asyncio.IncompleteReadError) as exc:
                    log.warning("bad request from %s: %s", peer, exc)
                    writer.write(encode_response(Response(400, b"bad request\n", "text/plain"), True))
                    await writer.drain()
                    break
                if request is None:
                    break
                try:
                    response = await self.route(request)
                except Exception as exc:
                    log.exception("handler failed")
                    response = Response(500, f"internal error: {exc!r}\n".encode(), "text/plain")
                self.http_log.append({"t": round(time.monotonic() - self.started, 3),
                                      "method": request.method, "path": request.path,
                                      "status": response.status})
                log.info("%s %s -> %d", request.method, request.path, response.status)
                close = request.headers.get("connection", "").lower() == "close" \
                    or request.version == "HTTP/1.0"
                writer.write(encode_response(response, close))
                await writer.drain()
                if close:
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def authorized(self, request: Request) -> bool:
        bearer = request.headers.get("authorization", "")
        # --ephemeral: OpenAI calls take a key handed out by POST /token (as a backend
        # mints client secrets); the device's own token is only for /token itself.
        if self.args.ephemeral and request.path.startswith("/v1/realtime/calls"):
            return bearer.startswith("Bearer ") and bearer[7:] in self.ephemeral_keys
        if not self.args.token:
            return True
        return bearer == f"Bearer {self.args.token}"

    def openai_error(self) -> Optional[Response]:
        """--openai-error KIND: the refusals OpenAI's /calls documents, with its JSON
        error body ({"error": {message, type, param, code}}) and headers."""
        kind = self.args.openai_error
        if kind.startswith("rate-limit-ms:"):
            ms = kind.split(":", 1)[1]
            return json_response(429, {"error": {
                "message": f"Rate limit reached for requests. Please try again in {ms}ms.",
                "type": "requests", "param": None, "code": "rate_limit_exceeded"}},
                {"retry-after-ms": ms, "x-ratelimit-remaining-requests": "0"})
        if kind == "quota":
            return json_response(429, {"error": {
                "message": "You exceeded your current quota, please check your plan and billing details.",
                "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}})
        if kind == "invalid-offer":
            return json_response(400, {"error": {
                "message": "Invalid SDP offer. Please try again with a WHIP-compliant offer.",
                "type": "invalid_request_error", "param": None, "code": "invalid_offer"}})
        if kind == "region":
            return json_response(403, {"error": {
                "code": "unsupported_country_region_territory",
                "message": "Country, region, or territory not supported",
                "param": None, "type": "request_forbidden"}})
        raise ValueError(f"unknown --openai-error {kind}")

    def injected_failure(self, route: str) -> Optional[Response]:
        """--fail-status: the offer is answered with an error, as a broken provider would.
        --openai-error: one of OpenAI's own refusals on the openai route. With
        --fail-count K only the first K offers fail."""
        if self.args.fail_count is not None and self.offers_seen >= self.args.fail_count:
            return None
        if route == "openai" and self.args.openai_error:
            return self.openai_error()
        status = self.args.fail_status
        if not status:
            return None
        headers = {}
        if self.args.retry_after is not None:
            headers["Retry-After"] = str(self.args.retry_after)
        if route == "whip":
            body = (f"<html><head><title>{status} {REASONS.get(status, 'Error')}</title></head>"
                    f"<body><h1>{status} {REASONS.get(status, 'Error')}</h1>"
                    "<p>injected failure</p></body></html>\n")
            return Response(status, body.encode(), "text/html; charset=utf-8", headers)
        if route == "openai":
            return json_response(status, {"error": {
                "message": "The server had an error while processing your request (injected).",
                "type": "server_error" if status >= 500 else "invalid_request_error",
                "param": None, "code": None if status >= 500 else "invalid_offer"}}, headers)
        return json_response(status, {"error": "injected failure", "status": status}, headers)

    def garbage_answer(self) -> str:
        return "this is not an SDP answer\r\n<html>oops</html>\r\n"

    async def route(self, request: Request) -> Response:
        segments = [s for s in request.path.split("/") if s]
        method = request.method
        if not self.authorized(request):
            return Response(401, json.dumps({"error": "unauthorized"}).encode(),
                            "application/json", {"WWW-Authenticate": 'Bearer realm="linnet-interop"'})

        # The backend's ephemeral-key route (its shape follows OpenAI's client_secrets).
        if segments == ["token"] and self.args.ephemeral:
            if method != "POST":
                return Response(405, headers={"Allow": "POST"})
            key = new_id("ek_")
            self.ephemeral_keys.add(key)
            return json_response(200, {"value": key, "expires_at": int(time.time()) + 60})

        # WHIP (RFC 9725)
        if segments == ["whip"]:
            if method != "POST":
                return Response(405, headers={"Allow": "POST"})
            return await self.sdp_offer(request, "whip", "/whip/")
        if len(segments) == 2 and segments[0] == "whip":
            session = self.sessions.get(segments[1])
            if method == "DELETE":
                if session is None:
                    return Response(404, b"no such session\n", "text/plain")
                await self.end_session(session, "whip delete")
                return Response(200)
            # No ICE restart here: PATCH is refused, which WHIP clients must handle.
            return Response(405, headers={"Allow": "DELETE"})

        # OpenAI Realtime
        if segments == ["v1", "realtime", "calls"]:
            if method != "POST":
                return Response(405, headers={"Allow": "POST"})
            return await self.sdp_offer(request, "openai", "/v1/realtime/calls/")
        if len(segments) == 5 and segments[:3] == ["v1", "realtime", "calls"] \
                and segments[4] == "hangup":
            if method != "POST":
                return Response(405, headers={"Allow": "POST"})
            session = self.sessions.get(segments[3])
            if session is None:
                return json_response(404, {"error": {"message": "Call not found.",
                                                     "type": "invalid_request_error",
                                                     "code": "call_not_found", "param": None}})
            await self.end_session(session, "openai hangup")
            return Response(200)

        # App backend voice route
        if len(segments) == 2 and segments[0] == "voice":
            if method != "POST":
                return Response(405, headers={"Allow": "POST"})
            return await self.backend_offer(request, segments[1])
        if len(segments) == 4 and segments[0] == "voice" and segments[3] == "close":
            if method != "POST":
                return Response(405, headers={"Allow": "POST"})
            session = self.sessions.get(segments[2])
            if session is None or session.chat_id != segments[1]:
                return json_response(404, {"error": "no such voice"})
            await self.end_session(session, "backend close")
            return json_response(200, {"seconds": session.call_seconds()})

        return Response(404, b"not found\n", "text/plain")

    async def sdp_offer(self, request: Request, route: str, location_prefix: str) -> Response:
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/sdp":
            if route == "openai":
                return json_response(415, {"error": {"message": "Content-Type must be application/sdp",
                                                     "type": "invalid_request_error",
                                                     "code": "invalid_content_type", "param": None}})
            return Response(415, b"Content-Type must be application/sdp\n", "text/plain")
        failure = self.injected_failure(route)
        if failure is not None:
            self.offers_seen += 1
            return failure
        if self.args.garbage:
            self.offers_seen += 1
            fake = new_id("")
            return Response(201, self.garbage_answer().encode(), "application/sdp",
                            {"Location": location_prefix + fake})
        session, answer = await self.new_session(route, request.body.decode("utf-8", "replace"))
        if session is None:
            if route == "openai":
                return json_response(400, {"error": {"message": f"Invalid offer: {answer}",
                                                     "type": "invalid_request_error",
                                                     "code": "invalid_offer", "param": None}})
            return Response(400, f"invalid offer: {answer}\n".encode(), "text/plain")
        return Response(201, answer.encode(), "application/sdp",
                        {"Location": location_prefix + session.id})

    async def backend_offer(self, request: Request, chat_id: str) -> Response:
        try:
            payload = json.loads(request.body or b"null")
            offer = payload["sdp"]
            if not isinstance(offer, str):
                raise TypeError("sdp is not a string")
        except (ValueError, KeyError, TypeError) as exc:
            return json_response(400, {"error": f"expected JSON {{\"sdp\": offer}}: {exc}"})
        failure = self.injected_failure("backend")
        if failure is not None:
            self.offers_seen += 1
            return failure
        if self.args.garbage:
            self.offers_seen += 1
            return json_response(200, {"id": new_id(""), "sdp": self.garbage_answer()})
        session, answer = await self.new_session("backend", offer, chat_id)
        if session is None:
            return json_response(400, {"error": f"invalid offer: {answer}"})
        return json_response(200, {"id": session.id, "sdp": answer})

    # -- run --

    async def run(self) -> int:
        server = await asyncio.start_server(self.handle_connection, self.args.host,
                                            self.args.port, limit=MAX_HEADER_BYTES)
        self.port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.on_signal, sig)
        log.info("listening on %s:%d, mode %s", self.args.host, self.port, self.args.mode)
        print(f"READY {self.port}", flush=True)
        try:
            if self.args.seconds:
                try:
                    await asyncio.wait_for(self.stop_event.wait(), self.args.seconds)
                except asyncio.TimeoutError:
                    self.exit_reason = f"--seconds {self.args.seconds}"
            else:
                await self.stop_event.wait()
        finally:
            server.close()
            for session in list(self.sessions.values()):
                await self.end_session(session, f"peer exit ({self.exit_reason})")
            self.write_report()
            if self.recorder:
                self.recorder.close()
        log.info("exit: %s", self.exit_reason)
        return 0

    def on_signal(self, sig) -> None:
        self.exit_reason = signal.Signals(sig).name
        self.stop_event.set()


def aiortc_version() -> str:
    try:
        from importlib.metadata import version
        return version("aiortc")
    except Exception:
        return "unknown"


def restrict_host_addresses(addresses: list[str]) -> None:
    """aioice gathers on every interface but loopback; tests want exactly these."""
    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        return [a for a in addresses if (":" in a and use_ipv6) or (":" not in a and use_ipv4)]
    aioice.ice.get_host_addresses = get_host_addresses


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="aiortc test peer for Linnet interop tests")
    p.add_argument("--listen", required=True, help="HOST:PORT (port 0: any free port)")
    p.add_argument("--mode", choices=["echo", "tone", "openai"], default="echo")
    p.add_argument("--record", help="write received audio to this WAV (48 kHz mono s16)")
    p.add_argument("--report", help="write a JSON report here (each call end and at exit)")
    p.add_argument("--seconds", type=float, default=0, help="exit after N seconds (0: never)")
    p.add_argument("--once", action="store_true", help="exit when the first call ends")
    p.add_argument("--token", help="require Authorization: Bearer TOKEN on every request")
    p.add_argument("--ephemeral", action="store_true",
                   help="serve POST /token → {\"value\": ek_…} and require such a key on /v1/realtime/calls")
    p.add_argument("--fail-status", type=int, help="answer every offer with this status")
    p.add_argument("--fail-count", type=int, help="with --fail-status: only the first K offers")
    p.add_argument("--retry-after", type=int, help="with --fail-status: a Retry-After header")
    p.add_argument("--garbage", action="store_true", help="answer offers with a non-SDP body")
    p.add_argument("--openai-error",
                   help="openai route: refuse offers as OpenAI does: rate-limit-ms:N (429, "
                        "retry-after-ms N), quota (429 insufficient_quota), invalid-offer "
                        "(400), region (403 unsupported_country_region_territory); with "
                        "--fail-count K only the first K offers")
    p.add_argument("--cancel-done-after", type=float,
                   help="openai mode: a cancelled response stays active (refusing a new "
                        "response.create) until its response.done, S seconds after the cancel")
    p.add_argument("--late-transcript", type=float,
                   help="openai mode: the user's transcription.completed comes S seconds "
                        "after the commit (after the assistant's answer)")
    p.add_argument("--plain-answer", action="store_true",
                   help="openai route: aiortc's answer as it is, not reshaped like OpenAI's")
    p.add_argument("--close-channel-after", type=float,
                   help="close the peer's own channel N seconds after it opens")
    p.add_argument("--peer-channel", dest="peer_channel", action="store_true", default=None,
                   help="open the 'peer-events' channel (default in echo and tone modes)")
    p.add_argument("--no-peer-channel", dest="peer_channel", action="store_false")
    p.add_argument("--big-message-size", type=int, default=100_000,
                   help="size of the large text sent on peer-events (clamped to the "
                        "offer's max-message-size)")
    p.add_argument("--tone-freq", type=float, default=440.0)
    p.add_argument("--tone-dbfs", type=float, default=-12.0, help="peak level of the tone")
    p.add_argument("--voice-seconds", type=float, default=1.5,
                   help="openai mode: how long the voice (the tone) plays per response")
    p.add_argument("--transcript", default="hello linnet",
                   help="openai mode: the user's transcript on every commit")
    p.add_argument("--reply", default="Hi, this is the test provider.",
                   help="openai mode: the assistant's transcript")
    p.add_argument("--tool-call", default=None, metavar="NAME:ARGS",
                   help="openai mode: the first response calls function NAME with the JSON ARGS")
    p.add_argument("--legacy-events", action="store_true",
                   help="openai mode: response.audio_transcript.* (older servers)")
    p.add_argument("--host-addresses",
                   help="comma list of addresses to gather host candidates on (default: "
                        "127.0.0.1 when listening on loopback, else every interface; "
                        "'all': every interface)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = p.parse_args(argv)
    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit():
        p.error("--listen must be HOST:PORT")
    args.host = host.strip("[]")
    args.port = int(port)
    return args


def main(argv=None) -> int:
    # A parent may start us with SIGTERM/SIGINT blocked (the mask is inherited, and
    # Linnet's test runner blocks them for its signalfd): unblock them, or SIGTERM
    # would never end the peer.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s peer %(levelname)s %(name)s: %(message)s")
    if args.log_level != "debug":
        for noisy in ("aioice", "aiortc"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.host_addresses == "all":
        pass
    elif args.host_addresses:
        restrict_host_addresses([a.strip() for a in args.host_addresses.split(",") if a.strip()])
    elif args.host in ("127.0.0.1", "localhost", "::1"):
        restrict_host_addresses(["::1"] if args.host == "::1" else ["127.0.0.1"])
    return asyncio.run(PeerServer(args).run())


if __name__ == "__main__":
    sys.exit(main())
