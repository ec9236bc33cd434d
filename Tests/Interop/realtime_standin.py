#!/usr/bin/env python3
"""An OpenAI-Realtime-like provider for Linnet's real-condition judges.

Built on peer.py (its HTTP server, ICE/DTLS set-up, OpenAI-shaped answer, ephemeral
keys and report), which it imports and does not change; peer.py's own behaviour is
untouched. What it adds, on the GA events of `oai-events`:

- **Server VAD** on the audio it receives (energy over 20 ms frames, `--vad-dbfs`;
  `silence_duration_ms` and `prefix_padding_ms` from the session, 500/300 by default
  as the real service): `input_audio_buffer.speech_started`, `…speech_stopped`,
  `…committed`, and with `create_response` a response.
- **interrupt_response**: speech that starts while a reply's audio is being sent stops
  that audio at once, sends `output_audio_buffer.cleared` (and `response.done`
  `cancelled` if the response was still open).
- **Replies are audio**: scripted sentences (WAV files, 48 kHz mono 16-bit) played in
  real time as the RTP voice (Opus through aiortc), one per user turn, in order;
  optionally a greeting when the session is set up. Each reply is an assistant message
  item (`response.output_item.added`, `output_audio_buffer.started`,
  `response.output_audio_transcript.delta`/`.done` with `item_id`, `response.done`,
  `output_audio_buffer.stopped` when its audio has all been sent).
- A client's `input_audio_buffer.commit` creates no response (OpenAI: committing "will
  not create a response from the model"); `response.create` does.
- `--answer-delay S`: an offer is answered S seconds late, as the real service's set-up.
- Client events accepted and logged: `response.cancel`, `output_audio_buffer.clear`,
  `input_audio_buffer.clear`/`commit`, `response.create`, `session.update`,
  `conversation.item.create` and `conversation.item.truncate {item_id, content_index,
  audio_end_ms}` (answered `conversation.item.truncated`; an `error` for an unknown
  item or an `audio_end_ms` beyond the audio sent for it; the log says how much of the
  item had been sent, in ms, and when).
- **Hears** the uplink as a provider's receiver would: each RTP packet decoded on
  arrival with libopus, lost packets concealed (PLC, in-band FEC), not through
  aiortc's jitter buffer (see UplinkDecoder); the VAD runs on that audio.
- **Records** what it hears (WAV; its time axis is the sender's RTP clock) with the
  CLOCK_MONOTONIC arrival time of every frame (and the RTP sequence number, timestamp
  and SSRC of the packet that made it heard), and writes a JSON
  report (peer.py's, plus a `standin` section per session: replies, interruptions,
  truncations, VAD turns, arrivals).
- With `--record-sent`, records what it **sends** as the receiver will hear it: every
  RTP packet it sends decoded with libopus (mono), with the CLOCK_MONOTONIC time the
  datagram left (after the send call returned), its sequence number, timestamp, SSRC.
- With `--latency-clicks WAV` (bench/latency.py), the voice is that WAV, played once,
  `--latency-clicks-after` seconds after the first uplink packet arrived, and silence
  otherwise; no greeting and no replies are needed (`--replies` becomes optional).

Usage (run with the interop venv's python, Tests/Interop/setup.sh):

    realtime_standin.py --listen 127.0.0.1:0 --replies replies.json \\
        --record in.wav --report report.json [--ephemeral --token T] [peer.py options]
    realtime_standin.py --listen 127.0.0.1:0 --latency-clicks clicks.wav \\
        [--latency-clicks-after 1.0] --record in.wav --record-sent out.wav --report report.json

`replies.json`: {"greeting": {"wav": "...", "text": "..."} | null,
                 "replies": [{"wav": "...", "text": "..."}, ...]}
stdout: `READY <port>` (peer.py's), logs on stderr. Times in the report are
CLOCK_MONOTONIC nanoseconds (`*_ns`, Python's time.monotonic_ns), the clock the room
plugin logs on, so the judges can put both on one axis.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import wave
from typing import Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402  (peer.py is this tool's base; see above)

SAMPLE_RATE = peer.SAMPLE_RATE
FRAME = peer.FRAME_SAMPLES


def read_wav48(path: str) -> np.ndarray:
    with wave.open(path, "rb") as w:
        if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise SystemExit(f"{path}: need 48 kHz mono 16-bit")
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()


class StereoPacedTrack(peer.PacedTrack):
    """peer.PacedTrack with each mono frame sent as stereo (L = R). aiortc encodes Opus
    in stereo, and its resampler upmixes a mono frame at −3 dB a channel (FFmpeg's
    centre mix level): the replies would reach the speaker 3 dB below their level."""

    async def recv(self):
        frame = await super().recv()
        mono = frame.to_ndarray().reshape(-1)
        stereo = np.repeat(mono, 2).reshape(1, -1)
        out = peer.AudioFrame.from_ndarray(stereo.astype(np.int16), format="s16", layout="stereo")
        out.sample_rate = frame.sample_rate
        out.pts = frame.pts
        out.time_base = frame.time_base
        return out


class Reply:
    """One assistant message being (or having been) voiced."""

    def __init__(self, index: int, kind: str, text: str, wav: str, samples: np.ndarray,
                 response_id: str, item_id: str, trigger: str) -> None:
        self.index = index
        self.kind = kind
        self.text = text
        self.wav = wav
        self.samples = samples
        self.response_id = response_id
        self.item_id = item_id
        self.trigger = trigger
        self.created_ns = time.monotonic_ns()
        self.audio_start_ns: Optional[int] = None
        self.audio_end_ns: Optional[int] = None
        self.sent = 0  # samples handed to the sender
        self.end_reason: Optional[str] = None
        self.response_done = False
        self.truncates: list = []

    @property
    def sent_ms(self) -> float:
        return self.sent * 1000.0 / SAMPLE_RATE

    def to_json(self) -> dict:
        return {"index": self.index, "kind": self.kind, "text": self.text, "wav": self.wav,
                "response_id": self.response_id, "item_id": self.item_id, "trigger": self.trigger,
                "created_ns": self.created_ns, "audio_start_ns": self.audio_start_ns,
                "audio_end_ns": self.audio_end_ns, "samples_total": int(len(self.samples)),
                "samples_sent": self.sent, "sent_ms": round(self.sent_ms, 3),
                "total_ms": round(len(self.samples) * 1000.0 / SAMPLE_RATE, 3),
                "end_reason": self.end_reason, "truncates": self.truncates}


class StandinScript(peer.OpenAIScript):
    """peer.py's scripted server with VAD, audio replies and truncation."""

    def __init__(self, session, channel) -> None:
        super().__init__(session, channel)
        td = self.session_obj["audio"]["input"]["turn_detection"]
        td["silence_duration_ms"] = 500  # the real service's default
        self.standin = session.server.standin
        self.replies: list[Reply] = []
        self.playing: Optional[Reply] = None
        self.next_reply = 0
        self.greeted = False
        self.generation: Optional[asyncio.Task] = None
        self.interruptions: list = []
        self.truncations: list = []
        self.vad_turns: list = []
        # VAD state
        self.in_speech = False
        self.loud_run = 0
        self.quiet_run = 0
        self.speech_start_sample = 0
        self.speech_item: Optional[str] = None
        self.samples_in = 0

    # -- session ------------------------------------------------------------------

    def start(self) -> None:
        super().start()
        if self.standin["greeting"] is not None:
            # greet once the client has had its say (session.update), or after 1 s
            self.session.spawn(self.greet_later(1.0))

    async def greet_later(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.greet()

    def greet(self) -> None:
        if self.greeted or self.standin["greeting"] is None:
            return
        self.greeted = True
        g = self.standin["greeting"]
        self.start_reply("greeting", -1, g["text"], g["wav"], g["samples"], "greeting")

    def on_session_update(self, event: dict) -> None:
        super().on_session_update(event)
        if not self.greeted and self.standin["greeting"] is not None:
            self.session.spawn(self.greet_later(0.3))

    def turn_detection(self) -> Optional[dict]:
        return self.session_obj["audio"]["input"].get("turn_detection")

    def handle(self, message) -> None:
        if isinstance(message, str):
            try:
                event = json.loads(message)
            except ValueError:
                event = None
            if isinstance(event, dict) and event.get("type") == "conversation.item.truncate":
                self.received.append({"t": self.session.t(), "t_ns": time.monotonic_ns(),
                                      "type": event.get("type"), "event": event})
                peer.log.info("session %s: oai-events <- conversation.item.truncate", self.session.id)
                self.on_truncate(event)
                return
        before = len(self.received)
        super().handle(message)
        for entry in self.received[before:]:
            entry.setdefault("t_ns", time.monotonic_ns())

    # -- replies ------------------------------------------------------------------

    def start_reply(self, kind: str, index: int, text: str, wav: str, samples: np.ndarray, trigger: str) -> None:
        self.stop_audio("superseded")
        response_id = peer.new_id("resp_")
        item_id = peer.new_id("item_")
        reply = Reply(index, kind, text, wav, samples, response_id, item_id, trigger)
        self.replies.append(reply)
        self.response_id = response_id
        self.response_done_sent = False
        self.playing = reply
        self.session.speaking = True
        self.emit({"type": "response.created",
                   "response": {"object": "realtime.response", "id": response_id,
                                "status": "in_progress", "output": []}})
        item = {"id": item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                "status": "in_progress", "content": []}
        self.emit({"type": "response.output_item.added", "response_id": response_id,
                   "output_index": 0, "item": item})
        self.emit({"type": "conversation.item.added", "previous_item_id": self.last_item_id, "item": item})
        self.last_item_id = item_id
        self.response_task = self.session.spawn(self.generate(reply))

    async def generate(self, reply: Reply) -> None:
        """The transcript streams faster than the audio plays, as the real service's:
        every word within 0.3 s, then response.done; the audio goes on playing."""
        delta_name, done_name = self.transcript_names()
        words = reply.text.split(" ")
        try:
            for k, word in enumerate(words):
                await asyncio.sleep(0.3 / max(1, len(words)))
                self.emit({"type": delta_name, "response_id": reply.response_id, "item_id": reply.item_id,
                           "output_index": 0, "content_index": 0,
                           "delta": word if k == len(words) - 1 else word + " "})
            self.emit({"type": done_name, "response_id": reply.response_id, "item_id": reply.item_id,
                       "output_index": 0, "content_index": 0, "transcript": reply.text})
            self.emit({"type": "response.done",
                       "response": self.response_obj(reply.response_id, "completed", reply.item_id, reply.text)})
            reply.response_done = True
            self.response_done_sent = True
        except asyncio.CancelledError:
            raise

    def next_samples(self, n: int) -> np.ndarray:
        """The voice: the playing reply's next n samples, else silence."""
        reply = self.playing
        if reply is None:
            return np.zeros(n, dtype=np.int16)
        if reply.audio_start_ns is None:
            reply.audio_start_ns = time.monotonic_ns()
            self.emit({"type": "output_audio_buffer.started", "response_id": reply.response_id})
        chunk = reply.samples[reply.sent: reply.sent + n]
        reply.sent += len(chunk)
        if reply.sent >= len(reply.samples):
            reply.audio_end_ns = time.monotonic_ns()
            reply.end_reason = "completed"
            self.playing = None
            self.session.speaking = False
            self.emit({"type": "output_audio_buffer.stopped", "response_id": reply.response_id})
        if len(chunk) < n:
            chunk = np.concatenate([chunk, np.zeros(n - len(chunk), dtype=np.int16)])
        return chunk

    def stop_audio(self, reason: str) -> Optional[Reply]:
        reply = self.playing
        if reply is None:
            return None
        reply.audio_end_ns = time.monotonic_ns()
        reply.end_reason = reason
        self.playing = None
        self.session.speaking = False
        return reply

    def close_response(self, reply: Reply, reason: str) -> None:
        """A response still generating is cancelled (response.done cancelled)."""
        task = self.response_task
        if task is not None and not task.done():
            task.cancel()
        if not reply.response_done:
            reply.response_done = True
            self.response_done_sent = True
            obj = self.response_obj(reply.response_id, "cancelled", reply.item_id, "")
            obj["status_details"] = {"type": "cancelled", "reason": reason}
            self.emit({"type": "response.done", "response": obj})

    # -- client events --------------------------------------------------------------


    def on_response_create(self, event: dict) -> None:
        task = self.response_task
        if task is not None and not task.done():
            self.error("conversation_already_has_active_response",
                       "Conversation already has an active response in progress.", event.get("event_id"))
            return
        self.respond_to_turn("response.create")

    def respond_to_turn(self, trigger: str) -> None:
        replies = self.standin["replies"]
        if self.next_reply >= len(replies):
            peer.log.warning("session %s: no reply left for turn %d", self.session.id, self.next_reply)
            self.next_reply += 1
            return
        r = replies[self.next_reply]
        self.start_reply("reply", self.next_reply, r["text"], r["wav"], r["samples"], trigger)
        self.next_reply += 1

    def on_response_cancel(self, event: dict) -> None:
        reply = self.replies[-1] if self.replies else None
        task = self.response_task
        if reply is None or task is None or task.done() or reply.response_done:
            self.error("response_cancel_not_active", "Cancellation failed: no active response found.",
                       event.get("event_id"))
            return
        # as peer.py: cancelling a response still generating also stops its voice
        stopped = self.stop_audio("response.cancel") if self.playing is reply else None
        self.close_response(reply, "client_cancelled")
        if stopped is not None:
            self.emit({"type": "output_audio_buffer.stopped", "response_id": reply.response_id})

    def on_output_clear(self, event: dict) -> None:
        reply = self.stop_audio("output_audio_buffer.clear")
        rid = reply.response_id if reply else self.response_id
        self.emit({"type": "output_audio_buffer.cleared", "response_id": rid})

    def on_truncate(self, event: dict) -> None:
        now = time.monotonic_ns()
        item_id = event.get("item_id")
        audio_end_ms = event.get("audio_end_ms")
        content_index = event.get("content_index", 0)
        reply = next((r for r in self.replies if r.item_id == item_id), None)
        entry = {"t_ns": now, "item_id": item_id, "content_index": content_index,
                 "audio_end_ms": audio_end_ms, "known_item": reply is not None,
                 "sent_ms": round(reply.sent_ms, 3) if reply else None,
                 "reply_index": reply.index if reply else None,
                 "reply_kind": reply.kind if reply else None,
                 "audio_start_ns": reply.audio_start_ns if reply else None,
                 "accepted": False}
        self.truncations.append(entry)
        if reply is not None:
            reply.truncates.append(entry)
        if reply is None:
            self.error("item_truncate_invalid_item_id", f"Item with item_id '{item_id}' not found.",
                       event.get("event_id"), "item_id")
        elif not isinstance(audio_end_ms, int) or isinstance(audio_end_ms, bool) or audio_end_ms < 0:
            self.error("invalid_value", "audio_end_ms must be a non-negative integer.",
                       event.get("event_id"), "audio_end_ms")
        elif audio_end_ms > reply.sent_ms + 0.5:
            self.error("invalid_value",
                       f"audio_end_ms {audio_end_ms} is beyond the {reply.sent_ms:.0f} ms of audio sent for the item.",
                       event.get("event_id"), "audio_end_ms")
        elif content_index != 0:
            self.error("invalid_value", "content_index must be 0.", event.get("event_id"), "content_index")
        else:
            entry["accepted"] = True
            self.emit({"type": "conversation.item.truncated", "item_id": item_id,
                       "content_index": content_index, "audio_end_ms": audio_end_ms})
        peer.log.info("session %s: truncate %s at %s ms (sent %s ms): %s", self.session.id, item_id,
                      audio_end_ms, entry["sent_ms"], "accepted" if entry["accepted"] else "refused")

    # -- server VAD -----------------------------------------------------------------

    def on_audio(self, samples: np.ndarray) -> None:
        """Energy VAD over each 20 ms frame received (its time base: samples received)."""
        td = self.turn_detection()
        start_sample = self.samples_in
        self.samples_in += len(samples)
        if not td:
            return  # push-to-talk: no server VAD
        x = samples.astype(np.float64)
        rms_db = 10 * np.log10(max((x * x).mean(), 1e-9) / 32768.0 ** 2)
        loud = rms_db > self.standin["vad_dbfs"]
        silence_ms = int(td.get("silence_duration_ms") or 500)
        padding_ms = int(td.get("prefix_padding_ms") or 300)
        if loud:
            self.loud_run += 1
            self.quiet_run = 0
        else:
            self.quiet_run += 1
            self.loud_run = 0
        frame_ms = len(samples) * 1000.0 / SAMPLE_RATE
        if not self.in_speech and self.loud_run >= self.standin["vad_onset_frames"]:
            self.in_speech = True
            onset = start_sample - (self.loud_run - 1) * len(samples)
            self.speech_start_sample = onset
            self.speech_item = peer.new_id("item_")
            audio_start_ms = max(0, int(onset * 1000 / SAMPLE_RATE) - padding_ms)
            self.emit({"type": "input_audio_buffer.speech_started", "audio_start_ms": audio_start_ms,
                       "item_id": self.speech_item})
            turn = {"started_ns": time.monotonic_ns(), "start_sample": int(onset), "item_id": self.speech_item}
            self.vad_turns.append(turn)
            if td.get("interrupt_response", True) and self.playing is not None:
                reply = self.stop_audio("vad_interrupt")
                self.interruptions.append({"t_ns": time.monotonic_ns(), "item_id": reply.item_id,
                                           "reply_index": reply.index, "sent_ms": round(reply.sent_ms, 3)})
                self.emit({"type": "output_audio_buffer.cleared", "response_id": reply.response_id})
                self.close_response(reply, "turn_detected")
        elif self.in_speech and self.quiet_run * frame_ms >= silence_ms:
            self.in_speech = False
            end = self.samples_in - self.quiet_run * len(samples)
            audio_end_ms = int(end * 1000 / SAMPLE_RATE)
            self.emit({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": audio_end_ms,
                       "item_id": self.speech_item})
            self.vad_turns[-1].update({"stopped_ns": time.monotonic_ns(), "end_sample": int(end)})
            self.emit({"type": "input_audio_buffer.committed", "previous_item_id": self.last_item_id,
                       "item_id": self.speech_item})
            self.last_item_id = self.speech_item
            self.session.input_samples_since_clear = 0
            if self.session_obj["audio"]["input"].get("transcription"):
                self.emit({"type": "conversation.item.input_audio_transcription.completed",
                           "item_id": self.speech_item, "content_index": 0,
                           "transcript": f"(user turn {len(self.vad_turns)})"})
            if td.get("create_response", True):
                task = self.response_task
                if task is not None and not task.done():
                    self.close_response(self.replies[-1], "turn_detected")
                self.respond_to_turn("server_vad")


class UplinkDecoder:
    """What a provider's receiver hears: every RTP packet decoded as it arrives, in
    sequence order, lost packets concealed by libopus (PLC, and the next packet's
    in-band FEC for the last one lost when it carries any), late or duplicate packets
    dropped. aiortc's own audio path is not used for this: its 16-packet jitter buffer
    discards many packets after each loss (at 10 % loss about 45 % of the frames never
    reached the track), which would judge aiortc rather than Linnet. Without
    libopus.so.0 (ctypes), lost packets become silence."""

    def __init__(self) -> None:
        import ctypes
        import ctypes.util
        self.ct = ctypes
        self.lib = None
        self.dec = None
        for name in ("libopus.so.0", ctypes.util.find_library("opus")):
            if not name:
                continue
            try:
                self.lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if self.lib is not None:
            self.lib.opus_decoder_create.restype = ctypes.c_void_p
            self.lib.opus_decoder_create.argtypes = [ctypes.c_int32, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
            self.lib.opus_decode.restype = ctypes.c_int
            self.lib.opus_decode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                                             ctypes.POINTER(ctypes.c_int16), ctypes.c_int, ctypes.c_int]
            self.lib.opus_packet_get_nb_samples.restype = ctypes.c_int
            self.lib.opus_packet_get_nb_samples.argtypes = [ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32]
            err = ctypes.c_int(0)
            self.dec = self.lib.opus_decoder_create(SAMPLE_RATE, 1, ctypes.byref(err))
        self.buf = (ctypes.c_int16 * (SAMPLE_RATE // 10))()
        self.next_seq: Optional[int] = None
        self.next_ts: Optional[int] = None
        self.concealed = 0
        self.fec = 0
        self.late = 0

    def _decode(self, data: Optional[bytes], samples: int, fec: int = 0) -> np.ndarray:
        if self.dec is None:
            return np.zeros(samples, dtype=np.int16)
        n = self.lib.opus_decode(self.dec, data, len(data) if data else 0, self.buf, samples, fec)
        if n <= 0:
            return np.zeros(samples, dtype=np.int16)
        return np.ctypeslib.as_array(self.buf)[:n].copy()

    def packet(self, seq: int, ts: int, payload: bytes) -> list:
        """The audio this packet makes heard: concealment for those lost before it, then
        its own; [] for a late or duplicate packet."""
        out = []
        if self.next_seq is not None:
            ahead = (seq - self.next_seq) & 0xFFFF
            if ahead >= 0x8000:
                self.late += 1
                return []
            ts_gap = (ts - self.next_ts) & 0xFFFFFFFF
            if ahead > 0:
                per = ts_gap // ahead if ahead else 0
                per = min(max(per, 120), 5760)
                for k in range(ahead):
                    last = k == ahead - 1
                    out.append(self._decode(payload if last else None, per, 1 if last else 0))
                    self.concealed += 1
                    self.fec += 1 if last else 0
            elif 0 < ts_gap < 10 * SAMPLE_RATE:
                out.append(np.zeros(ts_gap, dtype=np.int16))  # DTX: a pause in the timestamps
        n = self.lib.opus_packet_get_nb_samples(payload, len(payload), SAMPLE_RATE) if self.lib else FRAME
        n = n if n > 0 else FRAME
        out.append(self._decode(payload, n))
        self.next_seq = (seq + 1) & 0xFFFF
        self.next_ts = (ts + n) & 0xFFFFFFFF
        return out


class StandinSession(peer.Session):
    first_rtp_ns: Optional[int] = None
    clicks_sent = 0

    def voice_samples(self, n: int) -> np.ndarray:
        clicks = self.server.standin.get("latency_clicks")
        if clicks is not None:
            return self.click_samples(n, clicks)
        if isinstance(self.openai, StandinScript):
            return self.openai.next_samples(n)
        return np.zeros(n, dtype=np.int16)

    def click_samples(self, n: int, clicks: dict) -> np.ndarray:
        """--latency-clicks: the WAV once, `after` seconds after the first uplink packet
        (the call is up both ways by then), silence before and after."""
        out = np.zeros(n, dtype=np.int16)
        if self.first_rtp_ns is None or time.monotonic_ns() < self.first_rtp_ns + clicks["after_s"] * 1e9:
            return out
        samples = clicks["samples"]
        if self.clicks_sent == 0:
            clicks["start_ns"] = time.monotonic_ns()
        chunk = samples[self.clicks_sent:self.clicks_sent + n]
        out[:len(chunk)] = chunk
        self.clicks_sent += len(chunk)
        return out

    async def consume_audio(self, track) -> None:
        """aiortc's decoded track is drained and only counted: what the provider hears
        comes from the RTP packets themselves (UplinkDecoder, hooked in instrument)."""
        while True:
            try:
                frame = await track.recv()
            except peer.MediaStreamError:
                break
            self.audio_frames_received += 1
            self.audio_samples_received += frame.samples

    def instrument(self) -> None:
        super().instrument()
        if getattr(self, "_standin_hooked", False):
            return
        self._standin_hooked = True
        self.uplink = UplinkDecoder()
        if self.server.sent_rec is not None:
            self.hook_sent()
        for transceiver in self.pc.getTransceivers():
            receiver = transceiver.receiver
            counted = receiver._handle_rtp_packet

            async def handle(packet, arrival_time_ms: int, _orig=counted) -> None:
                self.on_rtp(packet)
                await _orig(packet, arrival_time_ms=arrival_time_ms)

            receiver._handle_rtp_packet = handle

    def hook_sent(self) -> None:
        """--record-sent: every RTP packet this side sends, decoded as the receiver
        will (a decoder of its own), stamped when the send call returned (on loopback
        the datagram is then in the receiver's socket)."""
        dtls = self.dtls_transport()
        if dtls is None:
            return
        from aiortc.rtp import RtpPacket, is_rtcp
        decoder = UplinkDecoder()
        original = dtls._send_rtp
        server = self.server

        async def send_rtp(data: bytes) -> None:
            await original(data)
            sent = time.monotonic_ns()
            if is_rtcp(data):
                return
            try:
                packet = RtpPacket.parse(data)
            except ValueError:
                return
            for chunk in decoder.packet(packet.sequence_number, packet.timestamp, bytes(packet.payload)):
                server.record_sent(chunk, sent, packet.sequence_number, packet.timestamp, packet.ssrc)

        dtls._send_rtp = send_rtp

    def on_rtp(self, packet) -> None:
        arrival = time.monotonic_ns()
        if self.first_rtp_ns is None:
            self.first_rtp_ns = arrival
        server = self.server
        rtp = (packet.sequence_number, packet.timestamp, packet.ssrc)
        for chunk in self.uplink.packet(packet.sequence_number, packet.timestamp, bytes(packet.payload)):
            for i in range(0, len(chunk), FRAME):
                part = chunk[i:i + FRAME]
                self.input_samples_since_clear += len(part)
                if len(part):
                    self.received_peak = max(self.received_peak, int(np.abs(part.astype(np.int32)).max()))
                server.record(part, arrival, rtp)
                if isinstance(self.openai, StandinScript):
                    self.openai.on_audio(part)

    def to_report(self) -> dict:
        out = super().to_report()
        s = self.openai
        if isinstance(s, StandinScript):
            out["standin"] = {
                "replies": [r.to_json() for r in s.replies],
                "interruptions": s.interruptions,
                "truncations": s.truncations,
                "vad_turns": s.vad_turns,
                "client_events": [{"t_ns": e.get("t_ns"), "type": e.get("type"),
                                   "event": e.get("event") if e.get("type") in (
                                       "conversation.item.truncate", "response.cancel",
                                       "output_audio_buffer.clear", "input_audio_buffer.commit",
                                       "input_audio_buffer.clear", "response.create") else None}
                                  for e in s.received],
                "session": s.session_obj,
                "uplink_decoder": {"libopus": self.uplink.dec is not None if hasattr(self, "uplink") else None,
                                   "concealed_packets": getattr(getattr(self, "uplink", None), "concealed", 0),
                                   "fec_attempts": getattr(getattr(self, "uplink", None), "fec", 0),
                                   "late_packets": getattr(getattr(self, "uplink", None), "late", 0)},
            }
        return out


class StandinServer(peer.PeerServer):
    def __init__(self, args, standin: dict) -> None:
        self.standin = standin
        # the recording is ours (with arrival times), not peer.py's
        self.rec_path = args.record
        args.record = None
        super().__init__(args)
        args.record = self.rec_path
        self.rec = peer.WavRecorder(args.record) if args.record else None
        self.rec_samples = 0
        # [sample index of the frame's first sample, n, arrival ns, RTP seq, ts, SSRC of
        # the packet that made it heard]
        self.arrivals: list = []
        self.sent_path = standin.get("record_sent")
        self.sent_rec = peer.WavRecorder(self.sent_path) if self.sent_path else None
        self.sent_samples = 0
        self.sent: list = []  # [first sample's index in --record-sent, n, send ns, RTP seq, ts, SSRC]

    def record(self, samples: np.ndarray, arrival: Optional[int], rtp: tuple = (-1, -1, -1)) -> None:
        if arrival is not None:
            self.arrivals.append([self.rec_samples, int(len(samples)), arrival, *rtp])
        if self.rec is not None:
            self.rec.write(samples)
        self.rec_samples += len(samples)

    def record_sent(self, samples: np.ndarray, sent: int, seq: int, ts: int, ssrc: int) -> None:
        self.sent.append([self.sent_samples, int(len(samples)), sent, seq, ts, ssrc])
        self.sent_rec.write(samples)
        self.sent_samples += len(samples)

    def write_report(self) -> None:
        super().write_report()
        if self.rec is not None:
            self.rec.flush()
        if self.args.report:
            with open(self.args.report) as f:
                report = json.load(f)
            report["standin"] = {"record": self.rec_path, "record_samples": self.rec_samples,
                                 "arrivals": self.arrivals, "vad_dbfs": self.standin["vad_dbfs"],
                                 "clock": "CLOCK_MONOTONIC ns"}
            if self.sent_rec is not None:
                self.sent_rec.flush()
                report["standin"].update({"record_sent": self.sent_path, "sent_samples": self.sent_samples,
                                          "sent": self.sent})
            clicks = self.standin.get("latency_clicks")
            if clicks is not None:
                report["standin"]["latency_clicks"] = {"wav": clicks["wav"], "after_s": clicks["after_s"],
                                                       "start_ns": clicks.get("start_ns")}
            tmp = self.args.report + ".tmp"
            with open(tmp, "w") as f:
                json.dump(report, f, default=str)
            os.replace(tmp, self.args.report)

    async def sdp_offer(self, request, route: str, location_prefix: str):
        """--answer-delay: the service's time to answer an offer (the real /calls takes
        about a second), so a session on demand has that much speech to catch up."""
        delay = self.standin.get("answer_delay") or 0
        if delay > 0:
            await asyncio.sleep(delay)
        return await super().sdp_offer(request, route, location_prefix)

    async def run(self) -> int:
        try:
            return await super().run()
        finally:
            if self.rec is not None:
                self.rec.close()
            if self.sent_rec is not None:
                self.sent_rec.close()


def main(argv=None) -> int:
    import signal
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    # allow_abbrev off: `--record` (peer.py's) must not be taken for `--record-sent`
    ap = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    ap.add_argument("--replies", help="replies.json (see the module doc); required unless --latency-clicks")
    ap.add_argument("--vad-dbfs", type=float, default=-45.0,
                    help="server VAD: a 20 ms frame above this RMS (0 dBFS = full-scale square) is speech")
    ap.add_argument("--vad-onset-frames", type=int, default=3,
                    help="server VAD: loud frames in a row that start speech (3: 60 ms)")
    ap.add_argument("--record-sent", help="WAV: every RTP packet sent, decoded as the receiver will hear it")
    ap.add_argument("--latency-clicks", help="WAV: the voice, once, instead of greeting and replies (bench/latency.py)")
    ap.add_argument("--latency-clicks-after", type=float, default=1.0,
                    help="seconds after the first uplink packet the --latency-clicks WAV starts")
    ap.add_argument("--answer-delay", type=float, default=0.0,
                    help="seconds before an SDP offer is answered (the service's set-up time)")
    mine, rest = ap.parse_known_args(argv)
    args = peer.parse_args(rest + ["--mode", "openai"])
    if mine.replies:
        with open(mine.replies) as f:
            spec = json.load(f)
        base = os.path.dirname(os.path.abspath(mine.replies))
    elif mine.latency_clicks:
        spec, base = {"greeting": None, "replies": []}, os.getcwd()
    else:
        raise SystemExit("realtime_standin.py: --replies is required (or --latency-clicks)")

    def load(entry):
        if entry is None:
            return None
        path = entry["wav"] if os.path.isabs(entry["wav"]) else os.path.join(base, entry["wav"])
        return {"wav": path, "text": entry["text"], "samples": read_wav48(path)}

    standin = {"greeting": load(spec.get("greeting")), "replies": [load(r) for r in spec.get("replies", [])],
               "vad_dbfs": mine.vad_dbfs, "vad_onset_frames": mine.vad_onset_frames,
               "record_sent": mine.record_sent, "latency_clicks": None, "answer_delay": mine.answer_delay}
    if mine.latency_clicks:
        standin["latency_clicks"] = {"wav": os.path.abspath(mine.latency_clicks), "after_s": mine.latency_clicks_after,
                                     "samples": read_wav48(mine.latency_clicks)}
    import logging
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s standin %(levelname)s %(name)s: %(message)s")
    if args.log_level != "debug":
        for noisy in ("aioice", "aiortc"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.host_addresses and args.host_addresses != "all":
        peer.restrict_host_addresses([a.strip() for a in args.host_addresses.split(",") if a.strip()])
    elif args.host in ("127.0.0.1", "localhost", "::1"):
        peer.restrict_host_addresses(["::1"] if args.host == "::1" else ["127.0.0.1"])
    # peer.py builds its sessions and scripts by these names: ours stand in for them.
    peer.Session = StandinSession
    peer.OpenAIScript = StandinScript
    peer.PacedTrack = StereoPacedTrack
    return asyncio.run(StandinServer(args, standin).run())


if __name__ == "__main__":
    sys.exit(main())
