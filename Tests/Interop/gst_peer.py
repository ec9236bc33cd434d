#!/usr/bin/python3
"""GStreamer webrtcbin test peer for Linnet's interop tests.

A second independent WebRTC stack beside the aiortc peer (peer.py): GStreamer 1.22's
webrtcbin, with libnice for ICE, OpenSSL for DTLS, libsrtp2 and usrsctp, driven from
Python through GObject introspection. Debian 12's /usr/bin/python3, the standard
library and `gi` only (Tests/Interop/gst-setup.sh installs the Debian packages).

Two modes:

    gst_peer.py answer --listen 127.0.0.1:0 [--mode echo|tone]
                [--offer-setup keep|actpass|active|passive]
                [--report F.json] [--record F.wav]
        An answerer behind the WHIP route (POST /whip, DELETE /whip/<id>) and the app
        backend route (POST /voice/<chat>, POST /voice/<chat>/<id>/close). Prints
        `READY <port>` on stdout once listening.

    gst_peer.py offer --url http://127.0.0.1:PORT/whip [--setup actpass|active|passive]
                [--seconds N] [--record F.wav] [--report F.json]
        A WHIP client: offers, sends a 440 Hz tone and data-channel messages on
        `gst-events`, records what comes back, checks the echoes, DELETEs. Exit 0 when
        the call connected, audio came back and every message was echoed intact.

Logs go to stderr. See README.md ("GStreamer peer") for the report and the findings.

Design notes:
- One GLib main loop owns every GStreamer object. webrtcbin calls back on its own
  threads (streaming threads, its operation thread, the SCTP thread): every callback
  only hands its facts to the main loop (GLib.idle_add). The HTTP server runs in a
  thread of its own and waits on a Future that the main loop resolves.
- Loopback ICE: libnice gathers host candidates on every interface it enumerates, and
  its enumeration leaves loopback out whenever another interface is up. webrtcbin's ICE
  object (GstWebRTCNice) exposes its NiceAgent as the `agent` property; calling
  `nice_agent_add_local_address(127.0.0.1)` on it before gathering replaces the
  enumeration, so the only host candidate is 127.0.0.1 and no datagram leaves this
  machine. UPnP (on by default in libnice, which would multicast SSDP) and ICE-TCP
  are turned off; no STUN or TURN server is set.
- The answer (or, as offerer, the offer) is sent once gathering is complete: webrtcbin
  writes the gathered candidates into its local description, so no trickle is needed.
- DTLS records are observed, not guessed: pad probes on webrtcbin's internal nicesink
  (what we send) and nicesrc (what we receive) parse the epoch-0 handshake records of
  every datagram (RFC 6347 §4.1 and §4.2.2 headers), so the report shows how the
  ClientHello was fragmented.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import http.client
import http.server
import json
import logging
import os
import re
import secrets
import signal
import struct
import sys
import threading
import time
import urllib.parse
from typing import Any, Callable, Optional

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstWebRTC", "1.0")
gi.require_version("GstSdp", "1.0")
gi.require_version("Nice", "0.1")
from gi.repository import GLib, Gst, GstSdp, GstWebRTC, Nice  # noqa: E402

log = logging.getLogger("gst-peer")

SAMPLE_RATE = 48000
RAW_CAPS = "audio/x-raw,format=S16LE,rate=48000,channels=1,layout=interleaved"
TEXT_SAMPLE_CHARS = 200
MAX_LOGGED_MESSAGES = 1000
MAX_LOGGED_DATAGRAMS = 40


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def truncate(text: str, limit: int = TEXT_SAMPLE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"...(+{len(text) - limit} chars)"


def on_main(fn: Callable, *args) -> None:
    """Runs fn(*args) on the GLib main loop (callbacks arrive on GStreamer's threads)."""
    def run() -> bool:
        try:
            fn(*args)
        except Exception:
            log.exception("main-loop callback failed")
        return False
    GLib.idle_add(run)


# --------------------------------------------------------------------------------------
# SDP helpers (text level: the tests want to see exactly what went over the wire)
# --------------------------------------------------------------------------------------


def sdp_setups(sdp: str) -> list:
    return re.findall(r"^a=setup:(\S+)", sdp, re.M)


def rewrite_setup(sdp: str, setup: str) -> str:
    return re.sub(r"^a=setup:\S+", "a=setup:" + setup, sdp, flags=re.M)


def sdp_candidates(sdp: str) -> list:
    return [line[2:].strip() for line in sdp.splitlines() if line.startswith("a=candidate:")]


def opus_payload_type(sdp: str) -> Optional[int]:
    m = re.search(r"^a=rtpmap:(\d+) opus/48000", sdp, re.M | re.I)
    return int(m.group(1)) if m else None


def parse_sdp(text: str, kind: GstWebRTC.WebRTCSDPType) -> GstWebRTC.WebRTCSessionDescription:
    res, msg = GstSdp.SDPMessage.new_from_text(text)
    if res != GstSdp.SDPResult.OK:
        raise ValueError("not SDP")
    return GstWebRTC.WebRTCSessionDescription.new(kind, msg)


# --------------------------------------------------------------------------------------
# Audio
# --------------------------------------------------------------------------------------


class WavRecorder:
    """Received audio as 48 kHz mono 16-bit PCM WAV, calls appended; the header is
    rewritten after every call so the file is valid whenever a test reads it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.file = open(path, "wb")
        self.data_bytes = 0
        self._header()

    def _header(self) -> None:
        self.file.seek(0)
        self.file.write(struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + self.data_bytes, b"WAVE",
                                    b"fmt ", 16, 1, 1, SAMPLE_RATE, SAMPLE_RATE * 2, 2, 16,
                                    b"data", self.data_bytes))
        self.file.seek(0, os.SEEK_END)

    def write(self, pcm: bytes) -> None:
        with self.lock:
            if not self.file.closed:
                self.file.write(pcm)
                self.data_bytes += len(pcm)

    def flush(self) -> None:
        with self.lock:
            if not self.file.closed:
                self._header()
                self.file.flush()

    def close(self) -> None:
        with self.lock:
            if not self.file.closed:
                self._header()
                self.file.close()

    @property
    def seconds(self) -> float:
        return round(self.data_bytes / 2 / SAMPLE_RATE, 3)


def peak_s16(pcm: bytes) -> int:
    if len(pcm) < 2:
        return 0
    samples = struct.unpack("<%dh" % (len(pcm) // 2), pcm[: len(pcm) // 2 * 2])
    return max(max(samples), -min(samples))


# --------------------------------------------------------------------------------------
# DTLS observation
# --------------------------------------------------------------------------------------

HANDSHAKE_TYPES = {0: "hello_request", 1: "client_hello", 2: "server_hello", 3: "hello_verify_request",
                   11: "certificate", 12: "server_key_exchange", 13: "certificate_request",
                   14: "server_hello_done", 15: "certificate_verify", 16: "client_key_exchange",
                   20: "finished"}
CONTENT_TYPES = {20: "change_cipher_spec", 21: "alert", 22: "handshake", 23: "application_data"}


def dtls_records(datagram: bytes) -> list:
    """The records of one DTLS datagram (RFC 6347 §4.1): content type, epoch, length and,
    for plaintext handshake records (epoch 0), the handshake header of §4.2.2: type,
    message length, message_seq, fragment_offset, fragment_length."""
    out = []
    i = 0
    while i + 13 <= len(datagram):
        ctype = datagram[i]
        epoch = int.from_bytes(datagram[i + 3:i + 5], "big")
        length = int.from_bytes(datagram[i + 11:i + 13], "big")
        body = datagram[i + 13:i + 13 + length]
        rec: dict = {"content": CONTENT_TYPES.get(ctype, ctype), "epoch": epoch, "length": length}
        if ctype == 22 and epoch == 0 and len(body) >= 12:
            rec.update({"handshake": HANDSHAKE_TYPES.get(body[0], body[0]),
                        "message_length": int.from_bytes(body[1:4], "big"),
                        "message_seq": int.from_bytes(body[4:6], "big"),
                        "fragment_offset": int.from_bytes(body[6:9], "big"),
                        "fragment_length": int.from_bytes(body[9:12], "big")})
        out.append(rec)
        i += 13 + length
    return out


class DtlsWatch:
    """Pad probes on webrtcbin's nicesink (sent) and nicesrc (received): the first DTLS
    datagrams each way, parsed."""

    def __init__(self, t: Callable[[], float]) -> None:
        self.t = t
        self.lock = threading.Lock()
        self.datagrams: list = []
        self.counts = {"sent": 0, "received": 0}

    def attach(self, bin_: Gst.Bin) -> None:
        bin_.connect("deep-element-added", self._element_added)

    def _element_added(self, _bin, _sub, element) -> None:
        factory = element.get_factory()
        name = factory.get_name() if factory else ""
        if name == "nicesink":
            pad, direction = element.get_static_pad("sink"), "sent"
        elif name == "nicesrc":
            pad, direction = element.get_static_pad("src"), "received"
        else:
            return
        pad.add_probe(Gst.PadProbeType.BUFFER | Gst.PadProbeType.BUFFER_LIST, self._probe, direction)

    def _probe(self, _pad, info, direction) -> Gst.PadProbeReturn:
        buffers = []
        buf = info.get_buffer()
        if buf is not None:
            buffers.append(buf)
        else:
            blist = info.get_buffer_list()
            if blist is not None:
                buffers.extend(blist.get(i) for i in range(blist.length()))
        for b in buffers:
            ok, mapinfo = b.map(Gst.MapFlags.READ)
            if not ok:
                continue
            try:
                data = bytes(mapinfo.data)
            finally:
                b.unmap(mapinfo)
            # RFC 7983: 20..63 is DTLS.
            if not data or not 20 <= data[0] <= 63:
                continue
            with self.lock:
                self.counts[direction] += 1
                if len(self.datagrams) < MAX_LOGGED_DATAGRAMS:
                    self.datagrams.append({"t": self.t(), "direction": direction, "bytes": len(data),
                                           "records": dtls_records(data)})
        return Gst.PadProbeReturn.OK

    def report(self) -> dict:
        with self.lock:
            datagrams = list(self.datagrams)
            counts = dict(self.counts)
        hellos = []
        for d in datagrams:
            for r in d["records"]:
                if r.get("handshake") == "client_hello":
                    hellos.append({"direction": d["direction"], "datagram_bytes": d["bytes"],
                                   "message_seq": r["message_seq"], "message_length": r["message_length"],
                                   "fragment_offset": r["fragment_offset"],
                                   "fragment_length": r["fragment_length"]})
        return {"dtls_datagrams": datagrams, "dtls_datagram_counts": counts, "client_hello_records": hellos}


# --------------------------------------------------------------------------------------
# GStreamer helpers
# --------------------------------------------------------------------------------------


# webrtcbin hands out its ICE object without taking a reference for the caller in a way
# PyGObject expects: when the Python wrapper goes, the object goes with it and webrtcbin
# crashes on its next use. Wrappers are kept here for the life of the process.
_KEEP_ALIVE: list = []


def configure_ice(webrtc: Gst.Element, addresses: list, transport: str = "udp") -> None:
    """Host candidates on `addresses` only (see the module notes), no UPnP; UDP, or with
    --ice-transport tcp only libnice's ICE-TCP candidates (RFC 6544: it gathers active,
    passive and simultaneous-open ones), or both."""
    tcp = transport in ("tcp", "both")
    udp = transport in ("udp", "both")
    ice = webrtc.get_property("ice-agent")
    _KEEP_ALIVE.append(ice)
    ice.set_property("ice-tcp", tcp)
    ice.set_property("ice-udp", udp)
    agent = ice.get_property("agent")
    _KEEP_ALIVE.append(agent)
    agent.set_property("upnp", False)
    agent.set_property("ice-tcp", tcp)
    agent.set_property("ice-udp", udp)
    if addresses == ["all"]:
        return  # libnice's own enumeration (which skips loopback when anything else is up)
    for a in addresses:
        addr = Nice.Address.new()
        if not addr.set_from_string(a):
            raise ValueError(f"bad local address {a}")
        agent.add_local_address(addr)


def gvalue_to_json(v: Any) -> Any:
    if isinstance(v, Gst.Structure):
        return structure_to_dict(v)
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if hasattr(v, "value_nick"):
        return v.value_nick
    if isinstance(v, (list, tuple)):
        return [gvalue_to_json(x) for x in v]
    return str(v)


def structure_to_dict(s: Gst.Structure) -> dict:
    out = {}
    for i in range(s.n_fields()):
        name = s.nth_field_name(i)
        try:
            value = gvalue_to_json(s.get_value(name))
            if name == "type" and isinstance(value, int):
                try:  # webrtcbin's stats carry GstWebRTCStatsType, which arrives as an int
                    value = GstWebRTC.WebRTCStatsType(value).value_nick
                except ValueError:
                    pass
            out[name] = value
        except Exception as exc:  # a type PyGObject cannot convert
            out[name] = f"<{exc.__class__.__name__}>"
    return out


def get_stats(webrtc: Gst.Element) -> dict:
    promise = Gst.Promise.new()
    webrtc.emit("get-stats", None, promise)
    if promise.wait() != Gst.PromiseResult.REPLIED:
        return {}
    reply = promise.get_reply()
    return structure_to_dict(reply) if reply is not None else {}


def stats_totals(stats: dict) -> dict:
    totals = {"rtp_packets_received": 0, "rtp_bytes_received": 0, "rtp_packets_sent": 0,
              "rtp_bytes_sent": 0, "rtp_packets_lost": 0}
    for entry in stats.values():
        if not isinstance(entry, dict):
            continue
        kind = entry.get("type")
        if kind == "inbound-rtp":
            totals["rtp_packets_received"] += int(entry.get("packets-received", 0) or 0)
            totals["rtp_bytes_received"] += int(entry.get("bytes-received", 0) or 0)
            totals["rtp_packets_lost"] += int(entry.get("packets-lost", 0) or 0)
        elif kind == "outbound-rtp":
            totals["rtp_packets_sent"] += int(entry.get("packets-sent", 0) or 0)
            totals["rtp_bytes_sent"] += int(entry.get("bytes-sent", 0) or 0)
    # The pair ICE selected, from the transport's selected-candidate-pair-id.
    pairs = []
    for entry in stats.values():
        if isinstance(entry, dict) and entry.get("type") == "transport":
            pair = stats.get(entry.get("selected-candidate-pair-id") or "", {})
            local = stats.get(pair.get("local-candidate-id") or "", {})
            remote = stats.get(pair.get("remote-candidate-id") or "", {})
            if local or remote:
                pairs.append({"local": {"ip": local.get("address"), "port": local.get("port"),
                                        "type": local.get("candidate-type")},
                              "remote": {"ip": remote.get("address"), "port": remote.get("port"),
                                         "type": remote.get("candidate-type")}})
    totals["selected_pairs"] = pairs
    return totals


def make(factory: str, **props) -> Gst.Element:
    e = Gst.ElementFactory.make(factory)
    if e is None:
        raise RuntimeError(f"GStreamer element {factory} is missing")
    for k, v in props.items():
        e.set_property(k.replace("_", "-"), v)
    return e


# --------------------------------------------------------------------------------------
# One peer connection (either role)
# --------------------------------------------------------------------------------------


class ChannelLog:
    def __init__(self, label: str, opened_by: str, t: float) -> None:
        self.label = label
        self.opened_by = opened_by
        self.id: Optional[int] = None
        self.opened_at: Optional[float] = None
        self.created_at = t
        self.closed_at: Optional[float] = None
        self.received_count = 0
        self.received_bytes = 0
        self.received_text = 0
        self.received_binary = 0
        self.sizes: list = []
        self.texts: list = []
        self.sent_count = 0
        self.sent_sizes: list = []
        self.send_errors: list = []
        self.full_texts: list = []  # kept for the offerer's echo check, not reported

    def to_report(self) -> dict:
        d = dict(self.__dict__)
        d.pop("full_texts")
        d.pop("channel", None)
        return d


class Call:
    """webrtcbin in a pipeline of its own, with audio in and out and data channels."""

    def __init__(self, args, recorder: Optional[WavRecorder], role: str, route: str,
                 chat_id: Optional[str] = None) -> None:
        self.args = args
        self.recorder = recorder
        self.role = role  # "answerer" or "offerer"
        self.route = route
        self.chat_id = chat_id
        self.id = secrets.token_hex(8)
        self.created = time.monotonic()
        self.created_iso = now_iso()
        self.connected_at: Optional[float] = None
        self.ended_at: Optional[float] = None
        self.end_reason: Optional[str] = None
        self.closed = False
        self.states: list = []
        self.channels: list = []
        self.peer_channel = None
        self.offer_sdp = ""
        self.offer_sdp_applied = ""
        self.answer_sdp = ""
        self.stats: dict = {}
        self.dtls_info: dict = {}
        self.audio_bytes = 0
        self.audio_peak = 0
        self.errors: list = []
        self.dtls = DtlsWatch(self.t)
        self.on_connected: Optional[Callable[[], None]] = None
        self.on_channel_open: Optional[Callable[[Any, ChannelLog], None]] = None
        self.on_failed: Optional[Callable[[str], None]] = None
        self.echo_src: Optional[Gst.Element] = None
        self.gathered: Optional[Callable[[], None]] = None

        self.pipe = Gst.Pipeline.new(f"call-{self.id}")
        self.dtls.attach(self.pipe)
        self.webrtc = make("webrtcbin", bundle_policy=GstWebRTC.WebRTCBundlePolicy.MAX_BUNDLE)
        self.webrtc.set_property("latency", 100)
        configure_ice(self.webrtc, args.host_addresses, args.ice_transport)
        self.pipe.add(self.webrtc)
        bus = self.pipe.get_bus()
        bus.add_signal_watch()
        bus.connect("message::error", self._bus_error)
        bus.connect("message::warning", self._bus_warning)
        for prop in ("connection-state", "ice-connection-state", "ice-gathering-state", "signaling-state"):
            self.webrtc.connect("notify::" + prop, self._notify_state)
        self.webrtc.connect("pad-added", self._pad_added)
        # Connected on webrtcbin's thread, at once: a message right behind the DCEP open
        # must find its handler.
        self.webrtc.connect("on-data-channel", lambda _w, ch: self.attach_channel(ch, "remote"))

    # -- helpers --

    def t(self) -> float:
        return round(time.monotonic() - self.created, 3)

    def _bus_error(self, _bus, msg) -> None:
        err, debug = msg.parse_error()
        text = f"{msg.src.get_name() if msg.src else '?'}: {err.message}"
        log.error("call %s: %s (%s)", self.id, text, debug)
        self.errors.append(text)

    def _bus_warning(self, _bus, msg) -> None:
        err, _debug = msg.parse_warning()
        log.warning("call %s: %s", self.id, err.message)

    def _notify_state(self, webrtc, pspec) -> None:
        state = webrtc.get_property(pspec.name)
        nick = state.value_nick if hasattr(state, "value_nick") else str(state)
        on_main(self._state_changed, pspec.name, nick)

    def _state_changed(self, what: str, state: str) -> None:
        self.states.append({"t": self.t(), "what": what, "state": state})
        log.info("call %s: %s %s", self.id, what, state)
        if what == "ice-gathering-state" and state == "complete" and self.gathered:
            done, self.gathered = self.gathered, None
            done()
        if what == "connection-state" and state == "connected" and self.connected_at is None:
            self.connected_at = time.monotonic()
            self.capture_dtls_info()
            if self.on_connected:
                self.on_connected()
        if what == "connection-state" and state == "failed" and self.on_failed:
            self.on_failed("connection failed")

    def capture_dtls_info(self) -> None:
        info: dict = {}
        try:
            trans = self.webrtc.emit("get-transceiver", 0)
            transport = trans.get_property("receiver").get_property("transport") if trans else None
            if transport is None:
                sctp = self.webrtc.get_property("sctp-transport")
                transport = sctp.get_property("transport") if sctp else None
            if transport is not None:
                info["dtls_role"] = "client" if transport.get_property("client") else "server"
                info["dtls_state"] = transport.get_property("state").value_nick
        except Exception as exc:
            info["dtls_error"] = repr(exc)
        self.dtls_info.update(info)

    # -- audio --

    def add_audio_source(self, payload_type: int) -> None:
        """What we send: a 440 Hz tone, or (echo) what we decoded, re-encoded."""
        caps = Gst.Caps.from_string(RAW_CAPS)
        if self.args.mode == "echo":
            src = make("appsrc", is_live=True, do_timestamp=True, format=Gst.Format.TIME, caps=caps)
            src.set_property("max-bytes", SAMPLE_RATE * 2)  # 1 s; older audio is dropped
            src.set_property("leaky-type", 2)  # downstream: drop the oldest
            self.echo_src = src
            chain = [src]
        else:
            volume = 10 ** (self.args.tone_dbfs / 20.0)
            src = make("audiotestsrc", is_live=True, wave="sine", freq=self.args.tone_freq,
                       volume=volume, samplesperbuffer=960)
            chain = [src, make("capsfilter", caps=caps)]
        chain += [make("audioconvert"), make("opusenc", bitrate=64000, frame_size=20),
                  make("rtpopuspay", pt=payload_type), make("queue")]
        for e in chain:
            self.pipe.add(e)
        for a, b in zip(chain, chain[1:]):
            if not a.link(b):
                raise RuntimeError(f"cannot link {a.get_name()} to {b.get_name()}")
        pad = self.webrtc.request_pad_simple("sink_%u")
        if chain[-1].get_static_pad("src").link(pad) != Gst.PadLinkReturn.OK:
            raise RuntimeError("cannot link the audio source to webrtcbin")
        trans = pad.get_property("transceiver")
        trans.set_property("direction", GstWebRTC.WebRTCRTPTransceiverDirection.SENDRECV)
        trans.set_property("codec-preferences", Gst.Caps.from_string(
            f"application/x-rtp,media=audio,encoding-name=OPUS,clock-rate=48000,payload={payload_type}"))

    def _pad_added(self, _webrtc, pad: Gst.Pad) -> None:
        if pad.get_direction() != Gst.PadDirection.SRC:
            return
        # Called on a streaming thread; building and linking here is what pad-added is for.
        chain = [make("rtpopusdepay"), make("opusdec", plc=True), make("audioconvert"),
                 make("audioresample"), make("capsfilter", caps=Gst.Caps.from_string(RAW_CAPS)),
                 make("appsink", emit_signals=True, sync=False, max_buffers=50, drop=False)]
        for e in chain:
            self.pipe.add(e)
        for a, b in zip(chain, chain[1:]):
            a.link(b)
        chain[-1].connect("new-sample", self._new_sample)
        for e in chain:
            e.sync_state_with_parent()
        if pad.link(chain[0].get_static_pad("sink")) != Gst.PadLinkReturn.OK:
            log.error("call %s: cannot link the received audio", self.id)
        log.info("call %s: receiving audio (%s)", self.id, pad.get_current_caps())

    def _new_sample(self, sink) -> Gst.FlowReturn:
        sample = sink.emit("pull-sample")
        if sample is None:
            return Gst.FlowReturn.OK
        buf = sample.get_buffer()
        ok, info = buf.map(Gst.MapFlags.READ)
        if not ok:
            return Gst.FlowReturn.OK
        try:
            pcm = bytes(info.data)
        finally:
            buf.unmap(info)
        self.audio_bytes += len(pcm)
        self.audio_peak = max(self.audio_peak, peak_s16(pcm))
        if self.recorder and not self.closed:
            self.recorder.write(pcm)
        if self.echo_src is not None and not self.closed:
            self.echo_src.emit("push-buffer", Gst.Buffer.new_wrapped(pcm))
        return Gst.FlowReturn.OK

    # -- data channels --

    def channel_log(self, channel) -> ChannelLog:
        for entry in self.channels:
            if entry.channel is channel:
                return entry
        raise KeyError(channel)

    def attach_channel(self, channel, opened_by: str) -> ChannelLog:
        """Any thread: the handlers only queue their facts for the main loop, in order."""
        entry = ChannelLog(channel.get_property("label"), opened_by, self.t())
        entry.channel = channel
        entry.id = channel.get_property("id")
        self.channels.append(entry)
        log.info("call %s: data channel %r (%s, id %s)", self.id, entry.label, opened_by, entry.id)
        channel.connect("on-open", lambda ch: on_main(self._channel_open, ch, entry))
        channel.connect("on-close", lambda ch: on_main(self._channel_closed, entry))
        channel.connect("on-message-string", lambda ch, s: on_main(self._message, entry, s))
        channel.connect("on-message-data", lambda ch, b: on_main(
            self._message, entry, bytes(b.get_data()) if b is not None else b""))
        channel.connect("on-error", lambda ch, err: on_main(self._channel_error, entry, err))
        if channel.get_property("ready-state") == GstWebRTC.WebRTCDataChannelState.OPEN:
            on_main(self._channel_open, channel, entry)
        return entry

    def _channel_open(self, channel, entry: ChannelLog) -> None:
        if entry.opened_at is not None:
            return
        entry.opened_at = self.t()
        entry.id = channel.get_property("id")
        log.info("call %s: data channel %r open (id %s)", self.id, entry.label, entry.id)
        if self.on_channel_open:
            self.on_channel_open(channel, entry)

    def _channel_closed(self, entry: ChannelLog) -> None:
        entry.closed_at = self.t()
        log.info("call %s: data channel %r closed", self.id, entry.label)

    def _channel_error(self, entry: ChannelLog, err) -> None:
        text = getattr(err, "message", str(err))
        entry.send_errors.append(f"error: {text}")
        log.warning("call %s: data channel %r error %s", self.id, entry.label, text)

    def _message(self, entry: ChannelLog, message) -> None:
        if message is None:
            message = ""
        is_text = isinstance(message, str)
        size = len(message.encode("utf-8")) if is_text else len(message)
        entry.received_count += 1
        entry.received_bytes += size
        if len(entry.sizes) < MAX_LOGGED_MESSAGES:
            entry.sizes.append(size)
        if is_text:
            entry.received_text += 1
            if len(entry.texts) < MAX_LOGGED_MESSAGES:
                entry.texts.append(truncate(message))
                entry.full_texts.append(message)
        else:
            entry.received_binary += 1
        if self.role == "answerer" and self.args.mode == "echo" and entry.opened_by == "remote":
            self.send(entry, message)

    def send(self, entry: ChannelLog, message) -> None:
        channel = entry.channel
        size = len(message.encode("utf-8")) if isinstance(message, str) else len(message)
        try:
            if isinstance(message, str):
                channel.send_string_full(message)
            else:
                channel.send_data_full(GLib.Bytes.new(message))
            entry.sent_count += 1
            if len(entry.sent_sizes) < MAX_LOGGED_MESSAGES:
                entry.sent_sizes.append(size)
        except Exception as exc:
            entry.send_errors.append(repr(exc))
            log.warning("call %s: send on %r failed: %r", self.id, entry.label, exc)

    def open_channel(self, label: str) -> ChannelLog:
        channel = self.webrtc.emit("create-data-channel", label, None)
        if channel is None:
            raise RuntimeError(f"webrtcbin would not create data channel {label!r}")
        return self.attach_channel(channel, "local")

    # -- end --

    def call_seconds(self) -> float:
        if self.connected_at is None:
            return 0.0
        end = self.ended_at if self.ended_at is not None else time.monotonic()
        return round(end - self.connected_at, 3)

    def close(self, reason: str) -> None:
        """Stats first (they need the live pipeline), then the teardown."""
        if self.closed:
            return
        self.end_reason = reason
        self.ended_at = time.monotonic()
        try:
            self.stats = get_stats(self.webrtc)
        except Exception as exc:
            self.stats = {"error": repr(exc)}
        if not self.dtls_info:
            self.capture_dtls_info()
        self.closed = True
        if self.echo_src is not None:
            self.echo_src.emit("end-of-stream")
        self.pipe.set_state(Gst.State.NULL)
        self.pipe.get_bus().remove_signal_watch()
        if self.recorder:
            self.recorder.flush()
        log.info("call %s ended: %s", self.id, reason)

    def to_report(self) -> dict:
        totals = stats_totals(self.stats) if self.stats else {}
        offer_setup = sdp_setups(self.offer_sdp)
        report = {
            "id": self.id,
            "role": self.role,
            "route": self.route,
            "chat_id": self.chat_id,
            "created": self.created_iso,
            "end_reason": self.end_reason,
            "call_seconds": self.call_seconds(),
            "states": self.states,
            "connection_state": self._last_state("connection-state"),
            "ice_connection_state": self._last_state("ice-connection-state"),
            "ever_connected": self.connected_at is not None,
            # What the offer said, what webrtcbin was given, what the answer says.
            "offer_setup": offer_setup[0] if offer_setup else None,
            "offer_setup_applied": (sdp_setups(self.offer_sdp_applied) or [None])[0],
            "answer_setup": (sdp_setups(self.answer_sdp) or [None])[0],
            **self.dtls_info,
            **totals,
            "audio_seconds_received": round(self.audio_bytes / 2 / SAMPLE_RATE, 3),
            "audio_peak_received": self.audio_peak,
            "data_channels": [c.to_report() for c in self.channels],
            "data_channel_labels": [c.label for c in self.channels],
            **self.dtls.report(),
            "local_candidates": sdp_candidates(self.answer_sdp if self.role == "answerer" else self.offer_sdp),
            "remote_candidates": sdp_candidates(self.offer_sdp if self.role == "answerer" else self.answer_sdp),
            "errors": self.errors,
            "offer_sdp": self.offer_sdp,
            "answer_sdp": self.answer_sdp,
            "stats": self.stats,
        }
        return report

    def _last_state(self, what: str) -> Optional[str]:
        for s in reversed(self.states):
            if s["what"] == what:
                return s["state"]
        return None


# --------------------------------------------------------------------------------------
# Answer mode
# --------------------------------------------------------------------------------------


class Answerer:
    def __init__(self, args) -> None:
        self.args = args
        self.calls: dict = {}
        self.ended: list = []
        self.http_log: list = []
        self.offers_seen = 0
        self.started = time.monotonic()
        self.started_iso = now_iso()
        self.recorder = WavRecorder(args.record) if args.record else None
        self.loop = GLib.MainLoop()
        self.exit_reason: Optional[str] = None
        self.port = 0
        self.report_lock = threading.Lock()

    # -- report --

    def write_report(self) -> None:
        if self.recorder:
            self.recorder.flush()
        if not self.args.report:
            return
        calls = self.ended + [c for c in self.calls.values() if c not in self.ended]
        sessions = [c.to_report() for c in calls]
        report = {
            "peer": "gstreamer",
            "gstreamer_version": Gst.version_string(),
            "mode": self.args.mode,
            "offer_setup_rewrite": self.args.offer_setup,
            "listen": f"{self.args.host}:{self.port}",
            "started": self.started_iso,
            "written": now_iso(),
            "exit_reason": self.exit_reason,
            "offers": self.offers_seen,
            "http": list(self.http_log),
            "record": {"path": self.args.record, "seconds": self.recorder.seconds} if self.recorder else None,
            "sessions": sessions,
            "last": {k: sessions[-1].get(k) for k in (
                "id", "route", "call_seconds", "connection_state", "offer_setup", "offer_setup_applied",
                "answer_setup", "dtls_role", "rtp_packets_received", "rtp_packets_sent",
                "data_channel_labels", "client_hello_records")} if sessions else None,
        }
        with self.report_lock:
            tmp = self.args.report + ".tmp"
            with open(tmp, "w") as f:
                json.dump(report, f, indent=1, default=str)
            os.replace(tmp, self.args.report)

    # -- calls (main loop) --

    def new_call(self, future: concurrent.futures.Future, route: str, offer: str, chat_id: Optional[str]) -> None:
        self.offers_seen += 1
        pt = opus_payload_type(offer)
        if "\nm=" not in offer.replace("\r\n", "\n"):
            future.set_result((None, "the offer has no media section"))
            return
        call = Call(self.args, self.recorder, "answerer", route, chat_id)
        call.offer_sdp = offer
        applied = offer if self.args.offer_setup == "keep" else rewrite_setup(offer, self.args.offer_setup)
        call.offer_sdp_applied = applied
        call.on_connected = lambda: self.connected(call)
        call.on_channel_open = lambda ch, entry: self.channel_open(call, entry)
        call.on_failed = lambda reason: self.end_call(call, reason)
        try:
            if pt is not None:
                call.add_audio_source(pt)
            description = parse_sdp(applied, GstWebRTC.WebRTCSDPType.OFFER)
        except Exception as exc:
            call.close(f"refused: {exc}")
            future.set_result((None, str(exc)))
            return
        call.pipe.set_state(Gst.State.PLAYING)

        def fail(reason: str) -> None:
            if not future.done():
                log.warning("call %s: %s", call.id, reason)
                call.close(f"refused: {reason}")
                future.set_result((None, reason))

        def answered(promise) -> None:
            reply = promise.get_reply()
            answer = reply.get_value("answer") if reply is not None and reply.has_field("answer") else None
            if answer is None:
                err = reply.get_value("error") if reply is not None and reply.has_field("error") else None
                on_main(fail, f"webrtcbin made no answer ({getattr(err, 'message', err)})")
                return
            # The description belongs to the promise's reply: take its text now.
            on_main(set_local, answer.sdp.as_text())

        def set_local(text: str) -> None:
            call.gathered = lambda: respond()
            self.calls[call.id] = call
            call.webrtc.emit("set-local-description", parse_sdp(text, GstWebRTC.WebRTCSDPType.ANSWER), None)

        def respond() -> None:
            desc = call.webrtc.get_property("local-description")
            call.answer_sdp = desc.sdp.as_text()
            log.info("call %s: answered on %s (setup %s → %s)", call.id, route,
                     (sdp_setups(applied) or ["?"])[0], (sdp_setups(call.answer_sdp) or ["?"])[0])
            if not future.done():
                future.set_result((call, call.answer_sdp))

        def remote_set(promise) -> None:
            reply = promise.get_reply()
            if reply is not None and reply.has_field("error"):
                on_main(fail, f"webrtcbin refused the offer: {reply.get_value('error').message}")
                return
            on_main(lambda: call.webrtc.emit("create-answer", None, Gst.Promise.new_with_change_func(answered)))

        call.webrtc.emit("set-remote-description", description, Gst.Promise.new_with_change_func(remote_set))

    def connected(self, call: Call) -> None:
        if self.args.peer_channel and call.role == "answerer":
            try:
                call.peer_channel = call.open_channel("peer-events")
            except Exception as exc:
                call.errors.append(repr(exc))

    def channel_open(self, call: Call, entry: ChannelLog) -> None:
        if entry.label == "peer-events" and entry.opened_by == "local":
            call.send(entry, json.dumps({"type": "hello", "peer": "gstreamer", "mode": self.args.mode}))
            if self.args.big_message_size > 0:
                body = "0123456789" * (self.args.big_message_size // 10 + 1)
                call.send(entry, ("big:" + body)[: self.args.big_message_size])

    def end_call(self, call: Call, reason: str) -> None:
        if call.closed:
            return
        call.close(reason)
        self.calls.pop(call.id, None)
        if call not in self.ended:
            self.ended.append(call)
        self.write_report()

    def find_call(self, call_id: str, chat_id: Optional[str] = None) -> Optional[Call]:
        call = self.calls.get(call_id)
        if call is None or (chat_id is not None and call.chat_id != chat_id):
            return None
        return call

    def on_main_wait(self, fn: Callable, *args, timeout: float = 20.0):
        """From an HTTP thread: run fn(future, *args) on the main loop, wait for it."""
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                fn(future, *args)
            except Exception as exc:
                log.exception("handler failed")
                if not future.done():
                    future.set_exception(exc)
        on_main(run)
        return future.result(timeout)

    def close_call(self, future, call_id: str, chat_id: Optional[str], reason: str) -> None:
        call = self.find_call(call_id, chat_id)
        if call is None:
            future.set_result(None)
            return
        seconds = call.call_seconds()
        self.end_call(call, reason)
        future.set_result(seconds)

    # -- run --

    def run(self) -> int:
        server = http.server.ThreadingHTTPServer((self.args.host, self.args.port), make_handler(self))
        server.daemon_threads = True
        self.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, self.on_signal, sig)
        if self.args.seconds:
            GLib.timeout_add(int(self.args.seconds * 1000), self.on_timeout)
        log.info("listening on %s:%d, mode %s, offer setup %s", self.args.host, self.port,
                 self.args.mode, self.args.offer_setup)
        print(f"READY {self.port}", flush=True)
        self.loop.run()
        server.shutdown()
        for call in list(self.calls.values()):
            self.end_call(call, f"peer exit ({self.exit_reason})")
        self.write_report()
        if self.recorder:
            self.recorder.close()
        log.info("exit: %s", self.exit_reason)
        return 0

    def on_signal(self, sig) -> bool:
        self.exit_reason = signal.Signals(sig).name
        self.loop.quit()
        return False

    def on_timeout(self) -> bool:
        self.exit_reason = f"--seconds {self.args.seconds}"
        self.loop.quit()
        return False


def make_handler(peer: Answerer):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "linnet-gst-peer"

        def log_message(self, fmt, *args) -> None:
            log.debug("http: " + fmt, *args)

        def body(self) -> bytes:
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n > 0 else b""

        def reply(self, status: int, body: bytes = b"", ctype: Optional[str] = None,
                  headers: Optional[dict] = None) -> None:
            path = urllib.parse.urlsplit(self.path).path
            peer.http_log.append({"t": round(time.monotonic() - peer.started, 3), "method": self.command,
                                  "path": path, "status": status})
            log.info("%s %s -> %d", self.command, path, status)
            self.send_response(status)
            if ctype:
                self.send_header("Content-Type", ctype)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def json_reply(self, status: int, obj: Any) -> None:
            self.reply(status, json.dumps(obj).encode(), "application/json")

        def segments(self) -> list:
            return [s for s in urllib.parse.urlsplit(self.path).path.split("/") if s]

        def offer(self, route: str, offer: str, chat_id: Optional[str] = None):
            try:
                return peer.on_main_wait(peer.new_call, route, offer, chat_id)
            except concurrent.futures.TimeoutError:
                return None, "timed out making the answer"

        def do_POST(self) -> None:
            seg = self.segments()
            body = self.body()
            if seg == ["whip"]:
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
                if ctype != "application/sdp":
                    return self.reply(415, b"Content-Type must be application/sdp\n", "text/plain")
                call, answer = self.offer("whip", body.decode("utf-8", "replace"))
                if call is None:
                    return self.reply(400, f"invalid offer: {answer}\n".encode(), "text/plain")
                return self.reply(201, answer.encode(), "application/sdp", {"Location": f"/whip/{call.id}"})
            if len(seg) == 2 and seg[0] == "voice":
                try:
                    offer = json.loads(body or b"null")["sdp"]
                    if not isinstance(offer, str):
                        raise TypeError("sdp is not a string")
                except (ValueError, KeyError, TypeError) as exc:
                    return self.json_reply(400, {"error": f"expected JSON {{\"sdp\": offer}}: {exc}"})
                call, answer = self.offer("backend", offer, seg[1])
                if call is None:
                    return self.json_reply(400, {"error": f"invalid offer: {answer}"})
                return self.json_reply(200, {"id": call.id, "sdp": answer})
            if len(seg) == 4 and seg[0] == "voice" and seg[3] == "close":
                seconds = peer.on_main_wait(peer.close_call, seg[2], seg[1], "backend close")
                if seconds is None:
                    return self.json_reply(404, {"error": "no such voice"})
                self.json_reply(200, {"seconds": seconds})
                on_main(peer.write_report)  # once more, with this request in `http`
                return None
            return self.reply(404, b"not found\n", "text/plain")

        def do_DELETE(self) -> None:
            seg = self.segments()
            self.body()
            if len(seg) == 2 and seg[0] == "whip":
                seconds = peer.on_main_wait(peer.close_call, seg[1], None, "whip delete")
                if seconds is None:
                    return self.reply(404, b"no such session\n", "text/plain")
                self.reply(200)
                on_main(peer.write_report)  # once more, with this request in `http`
                return None
            return self.reply(404, b"not found\n", "text/plain")

        def do_PATCH(self) -> None:
            self.body()
            self.reply(405, b"no ICE restart here\n", "text/plain", {"Allow": "DELETE"})

    return Handler


# --------------------------------------------------------------------------------------
# Offer mode
# --------------------------------------------------------------------------------------


class Offerer:
    """webrtcbin as a WHIP client: tone out, echo recorded, messages echoed."""

    def __init__(self, args) -> None:
        self.args = args
        self.args.mode = "tone"
        self.recorder = WavRecorder(args.record) if args.record else None
        self.loop = GLib.MainLoop()
        self.call = Call(args, self.recorder, "offerer", "whip")
        self.http_log: list = []
        self.location: Optional[str] = None
        self.exit_reason: Optional[str] = None
        self.failures: list = []
        self.messages = self.test_messages()
        self.started = time.monotonic()
        self.events_entry: Optional[ChannelLog] = None

    @staticmethod
    def test_messages() -> list:
        # A small text, one over a 1200-byte SCTP packet (fragmented by usrsctp and
        # reassembled by Linnet, both ways), a larger one, and JSON.
        pattern = "0123456789abcdef"
        return ["hello from gstreamer",
                "frag:" + (pattern * 100)[:1495],
                "big:" + (pattern * 1000)[:9996],
                json.dumps({"type": "ping", "n": 4})]

    def url(self, path: Optional[str] = None) -> urllib.parse.SplitResult:
        u = urllib.parse.urlsplit(self.args.url)
        if path is not None:
            u = u._replace(path=path)
        return u

    def http(self, method: str, path: str, body: bytes = b"", ctype: Optional[str] = None):
        u = self.url()
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=15)
        headers = {"Content-Type": ctype} if ctype else {}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.http_log.append({"t": round(time.monotonic() - self.started, 3), "method": method,
                              "path": path, "status": resp.status})
        log.info("%s %s -> %d", method, path, resp.status)
        location = resp.getheader("Location")
        conn.close()
        return resp.status, data, location

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, self.on_signal, sig)
        call = self.call
        call.add_audio_source(111)
        call.on_channel_open = self.channel_open
        call.on_connected = self.connected
        call.on_failed = lambda reason: self.finish(reason)
        # webrtcbin refuses to create channels before it leaves NULL. The offer is
        # made by hand rather than on on-negotiation-needed: one offer, once.
        call.pipe.set_state(Gst.State.PLAYING)
        self.events_entry = call.open_channel("gst-events")
        call.webrtc.emit("create-offer", None, Gst.Promise.new_with_change_func(self.offer_made))
        GLib.timeout_add(int((self.args.connect_timeout) * 1000), self.connect_timeout)
        self.loop.run()
        self.write_report()
        if self.recorder:
            self.recorder.close()
        ok = not self.failures
        log.info("exit: %s (%s)", self.exit_reason, "ok" if ok else "; ".join(self.failures))
        return 0 if ok else 1

    def offer_made(self, promise) -> None:
        reply = promise.get_reply()
        offer = reply.get_value("offer") if reply is not None and reply.has_field("offer") else None
        if offer is None:
            on_main(self.fail_now, "webrtcbin made no offer")
            return
        # The description belongs to the promise's reply: take its text now.
        on_main(self.set_local, offer.sdp.as_text())

    def set_local(self, text: str) -> None:
        if self.args.setup != "actpass":
            text = rewrite_setup(text, self.args.setup)
        self.call.gathered = self.post_offer
        self.call.webrtc.emit("set-local-description", parse_sdp(text, GstWebRTC.WebRTCSDPType.OFFER), None)

    def post_offer(self) -> None:
        call = self.call
        call.offer_sdp = call.webrtc.get_property("local-description").sdp.as_text()
        call.offer_sdp_applied = call.offer_sdp
        # The POST blocks for a moment (Linnet gathers, then answers): in a thread, so
        # the main loop keeps turning.
        def post() -> None:
            try:
                status, body, location = self.http("POST", self.url().path or "/", call.offer_sdp.encode(),
                                                   "application/sdp")
            except Exception as exc:
                on_main(self.fail_now, f"POST failed: {exc!r}")
                return
            on_main(self.answered, status, body, location)
        threading.Thread(target=post, daemon=True).start()

    def answered(self, status: int, body: bytes, location: Optional[str]) -> None:
        if status != 201 or not location:
            self.fail_now(f"POST answered {status} (Location {location!r}): {body[:200]!r}")
            return
        self.location = urllib.parse.urljoin(self.args.url, location)
        self.call.answer_sdp = body.decode("utf-8", "replace")
        try:
            answer = parse_sdp(self.call.answer_sdp, GstWebRTC.WebRTCSDPType.ANSWER)
        except ValueError:
            self.fail_now("the answer is not SDP")
            return
        log.info("answer: setup %s (we offered %s)", (sdp_setups(self.call.answer_sdp) or ["?"])[0],
                 self.args.setup)
        def applied(promise) -> None:
            reply = promise.get_reply()
            if reply is not None and reply.has_field("error"):
                on_main(self.fail_now, f"webrtcbin refused the answer: {reply.get_value('error').message}")
        self.call.webrtc.emit("set-remote-description", answer, Gst.Promise.new_with_change_func(applied))

    def connected(self) -> None:
        GLib.timeout_add(int(self.args.seconds * 1000), self.call_done)

    def channel_open(self, channel, entry: ChannelLog) -> None:
        if entry is self.events_entry:
            for m in self.messages:
                self.call.send(entry, m)

    def connect_timeout(self) -> bool:
        if self.call.connected_at is None and not self.call.closed:
            self.finish("not connected in time")
        return False

    def call_done(self) -> bool:
        self.finish(f"--seconds {self.args.seconds}")
        return False

    def fail_now(self, reason: str) -> None:
        self.failures.append(reason)
        self.finish(reason)

    def finish(self, reason: str) -> None:
        if self.exit_reason is not None:
            return
        self.exit_reason = reason
        call = self.call
        call.close(reason)
        if self.location:
            try:
                status, _body, _loc = self.http("DELETE", urllib.parse.urlsplit(self.location).path)
                if status != 200:
                    self.failures.append(f"DELETE answered {status}")
            except Exception as exc:
                self.failures.append(f"DELETE failed: {exc!r}")
        self.check()
        self.loop.quit()

    def check(self) -> None:
        call = self.call
        if call.connected_at is None:
            self.failures.append("never connected")
            return
        echoed = self.events_entry.full_texts if self.events_entry else []
        if echoed != self.messages:
            self.failures.append(f"echoes differ: sent sizes {[len(m) for m in self.messages]}, "
                                 f"got {[len(m) for m in echoed]}")
        if call.audio_bytes < SAMPLE_RATE:  # under a second of audio back
            self.failures.append(f"only {call.audio_bytes // 2} samples of audio came back")

    def write_report(self) -> None:
        if self.recorder:
            self.recorder.flush()
        if not self.args.report:
            return
        session = self.call.to_report()
        echoed = self.events_entry.full_texts if self.events_entry else []
        report = {
            "peer": "gstreamer",
            "gstreamer_version": Gst.version_string(),
            "mode": "offer",
            "url": self.args.url,
            "setup_offered": self.args.setup,
            "exit_reason": self.exit_reason,
            "ok": not self.failures,
            "failures": self.failures,
            "http": self.http_log,
            "record": {"path": self.args.record, "seconds": self.recorder.seconds} if self.recorder else None,
            "messages_sent_sizes": [len(m.encode()) for m in self.messages],
            "messages_echoed_sizes": [len(m.encode()) for m in echoed],
            "messages_echoed_intact": echoed == self.messages,
            "sessions": [session],
            "last": session,
        }
        tmp = self.args.report + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1, default=str)
        os.replace(tmp, self.args.report)

    def on_signal(self, sig) -> bool:
        self.fail_now(signal.Signals(sig).name)
        return False


# --------------------------------------------------------------------------------------
# Entry
# --------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="GStreamer webrtcbin test peer for Linnet interop tests")
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("answer", help="answer offers over WHIP and the backend route")
    a.add_argument("--listen", required=True, help="HOST:PORT (port 0: any free port)")
    a.add_argument("--mode", choices=["echo", "tone"], default="echo")
    a.add_argument("--offer-setup", choices=["keep", "actpass", "active", "passive"], default="keep",
                   help="rewrite the offer's a=setup before webrtcbin sees it")
    a.add_argument("--seconds", type=float, default=0, help="exit after N seconds (0: never)")
    a.add_argument("--no-peer-channel", dest="peer_channel", action="store_false", default=True,
                   help="do not open the 'peer-events' channel")
    a.add_argument("--big-message-size", type=int, default=20000,
                   help="size of the large text sent on peer-events after the hello (0: none)")

    o = sub.add_parser("offer", help="offer to a WHIP endpoint")
    o.add_argument("--url", required=True, help="the WHIP endpoint, http://HOST:PORT/whip")
    o.add_argument("--setup", choices=["actpass", "active", "passive"], default="actpass",
                   help="the a=setup our offer carries")
    o.add_argument("--seconds", type=float, default=4, help="call length after connecting")
    o.add_argument("--connect-timeout", type=float, default=15)

    for q in (a, o):
        q.add_argument("--record", help="write received audio to this WAV (48 kHz mono s16)")
        q.add_argument("--report", help="write a JSON report here")
        q.add_argument("--tone-freq", type=float, default=440.0)
        q.add_argument("--tone-dbfs", type=float, default=-12.0, help="peak level of the tone")
        q.add_argument("--host-addresses", default=None,
                       help="comma list of addresses for host candidates (default 127.0.0.1; "
                            "'all': libnice's own choice of interfaces)")
        q.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
        q.add_argument("--ice-transport", default="udp", choices=["udp", "tcp", "both"],
                       help="candidates libnice gathers: UDP (default), ICE-TCP only, or both")
    args = p.parse_args(argv)
    if args.command == "answer":
        host, sep, port = args.listen.rpartition(":")
        if not sep or not port.isdigit():
            p.error("--listen must be HOST:PORT")
        args.host = host.strip("[]")
        args.port = int(port)
        default_address = "::1" if args.host == "::1" else "127.0.0.1"
    else:
        host = urllib.parse.urlsplit(args.url).hostname or "127.0.0.1"
        default_address = "::1" if host == "::1" else "127.0.0.1"
    args.host_addresses = [x.strip() for x in (args.host_addresses or default_address).split(",") if x.strip()]
    return args


def main(argv=None) -> int:
    # A parent may start us with SIGTERM/SIGINT blocked (Linnet's test runner blocks them
    # for its signalfd, and the mask is inherited): unblock them.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s gst-peer %(levelname)s: %(message)s")
    Gst.init(None)
    if args.command == "answer":
        return Answerer(args).run()
    return Offerer(args).run()


if __name__ == "__main__":
    sys.exit(main())
