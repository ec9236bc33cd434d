#!/usr/bin/env python3
"""The latency Linnet adds, measured: `linnet run`, unmodified, in real time
against the Realtime stand-in (Tests/Interop/realtime_standin.py) on loopback, no relay,
no loss, with the room plugin (Tests/Room) as its microphone and speaker: 10 ms ALSA
periods (the room's default), Linnet's own defaults (20 ms frames, voice mode, aec auto,
which is on with a microphone and a speaker).

Every time is CLOCK_MONOTONIC: the room's timeline (what reached the microphone, what
the speaker played, each playback write), the stand-in's logs, and the datagrams on the
loopback interface as the kernel stamped them (an AF_PACKET socket: root; without it
the stand-in's own stamps, which carry its Python event loop's delay).

Uplink: the room's talker makes 10 ms chirps (600 Hz to 4 kHz) at known samples of the
microphone timeline, at a spacing that puts them at every phase of the 20 ms frame.
Each is found (matched filter) in the stand-in's decoding of each packet it received;
the packet whose decoded frame holds the chirp's start is "the packet containing it",
and `q` is where in that frame (0..959) the start sits.
  onset_to_wire  the chirp's start at the microphone → that packet on the wire: what a
                 user would call mouth to wire; it holds the wait for the rest of the
                 20 ms frame (20 ms − q, 10 ms on average), unavoidable with 20 ms frames.
  added          from the last sample of that frame at the microphone (onset + the
                 960 − q samples after the onset in the decoded frame) to the wire: what
                 Linnet adds beyond the framing. It splits exactly in two, because the
                 packets' true ends are capture period boundaries (the room's capture
                 start + k × 10 ms; which one from the packets' RTP timestamps and their
                 earliest departure): the algorithmic delay (Opus's 6.5 ms lookahead plus
                 the capture hooks' own: with aec, the 16 kHz canceller's resampling and
                 the residual echo suppressor's frame), which moves the chirp later in the
                 stream, constant over the run; and the processing from the frame's last
                 sample at the microphone to the wire: the ALSA period's wake-up (the
                 room's timer, as a card's interrupt), the capture thread's read and
                 pipeline (format, hooks), the ring and its eventfd, the loop's wake-up,
                 Opus encoding, SRTP, sendto (loopback UDP: microseconds).
Downlink: the stand-in's voice is the same chirps at known samples of what it sends
(`--latency-clicks`); it decodes each packet it sends as Linnet will (`--record-sent`).
Each chirp is found in that decoding (its packet and `q`), then, as the very same
samples, on the room's speaker.
  arrival_to_speaker   that packet on the wire → its first sample heard (the chirp
                 heard − q): the jitter buffer's wait, decoding, Linnet's playback
                 queues, the device's buffer (below).
  beyond_jitter_target the same minus the jitter buffer's target delay at that moment
                 (`jitter_target_ms` of Linnet's stats lines, one a second): the delay
                 "beyond the jitter buffer's target".
  device         the device's part: from the playback write that carried the packet's
                 first sample (the room logs each write, `log_writes`, with the frames
                 still queued: snd_pcm_delay) to that sample heard.
  linnet         the rest: wire → that write: the jitter buffer's wait, decoding, and
                 the playback ring (AudioIO: a 10 ms target, topped up in 10 ms pieces
                 when a period's take leaves it below: a piece waits about a period for
                 the next take). The playback thread renders each period just in time
                 (PlaybackThread's JustInTime: once the device holds a period and a
                 half), so nothing waits in the thread. Only the jitter buffer's part
                 varies: it pops a frame per 20 ms pull of the speaker, and places a
                 talkspurt's first frame (the call's first too: the pulls' phase is
                 known from the idle pulls before it) on the pull nearest its target in
                 half frames (a half pull first when that is nearer), so it holds
                 packets within 5 ms of the target as placed; the target then grows by
                 the lateness the window sees (a few ms here) and the packets' wait
                 stays, up to half a frame below the target before a half-frame insert
                 (JitterBuffer's drift control).

Linnet runs with `--duplex full`. With its defaults (`duplex auto`, aec on with a
microphone and a speaker) the microphone is held, silence sent, while the echo
canceller has not converged (AudioIO's interim `echoAudible = !converged`), and in a
room without echo, or before the assistant has spoken, it never converges: the uplink
would carry nothing to time. `--duplex full` only stops that hold; the audio path, the
canceller and its suppressor included, is the default one. `--flags "--duplex full --no-aec"`
times the path without the canceller (a headset, a line-level set-up).

usage: bench/latency.py LINNET [--clicks N] [--out DIR] [--flags "…"] [--no-sniff] [--json F]
prints BENCH latency_* lines and a summary; the run's files stay in DIR (build/latency).
It takes about 30 s (a 25 s call, set-up and analysis).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def interop_python() -> str:
    return subprocess.run([os.path.join(ROOT, "Tests/Interop/setup.sh")], check=True, text=True,
                          stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]


# The analysis needs numpy, the stand-in aiortc: both are in the interop venv, so the
# bench runs there (re-executing itself once).
# (Not a LINNET_ variable: linnet refuses environment variables it does not know.)
if os.environ.pop("BENCH_LATENCY_IN_VENV", None) != "1":
    py = interop_python()
    os.environ["BENCH_LATENCY_IN_VENV"] = "1"
    os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "Tests/Speech"))
import run_duplex  # noqa: E402  (the room, the stand-in and `linnet run`, as the duplex judge sets them up)
import speech  # noqa: E402

RATE = 48000
FRAME = 960          # Linnet's 20 ms frame, and the stand-in's
PERIOD = 480         # the room's 10 ms period
CHIRP_MS = 10
SPACING_MS = 253.0   # 253 ≡ 13 (mod 20): 20 chirps visit every ms of the 20 ms frame
LEAD_MS = 300        # the talker's chirps start this long after the stand-in's marker
MARKER_MS = 60
# Linnet's playback queue in `run`: a 10 ms piece waits about a period in the ring
# (AudioIO's 10 ms playout target) for the playback thread's next take.
QUEUED_MS = 10


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- signals -----------------------------------------------------------------------------------

# The chirps' frequency tracks (Hz, piecewise linear over the 10 ms), taken in turn: a
# chirp matches the other three at most 0.5, so a neighbour 253 ms away is never taken
# for it (the same shape comes back only after a second).
SHAPES = [(600, 4000), (4000, 600), (4000, 600, 4000), (600, 4000, 600)]


def chirp(k: int = 0) -> np.ndarray:
    """The k-th chirp: 10 ms sweeping 600 Hz–4 kHz (SHAPES), 0.5 ms raised-cosine
    edges, −6 dBFS peak: well inside the canceller's 16 kHz band and Opus's, a sharp
    matched-filter peak."""
    n = RATE * CHIRP_MS // 1000
    track = SHAPES[k % len(SHAPES)]
    f = np.interp(np.arange(n), np.linspace(0, n - 1, len(track)), track)
    x = np.sin(2 * np.pi * np.cumsum(f) / RATE)
    edge = RATE // 2000
    ramp = 0.5 - 0.5 * np.cos(np.pi * np.arange(edge) / edge)
    x[:edge] *= ramp
    x[-edge:] *= ramp[::-1]
    return 16384 * x


def click_track(count: int, lead: int) -> tuple[np.ndarray, list]:
    """`count` chirps, the first `lead` samples in, SPACING_MS apart (to the sample)."""
    n = RATE * CHIRP_MS // 1000
    offsets = [lead + int(round(k * SPACING_MS * RATE / 1000)) for k in range(count)]
    x = np.zeros(offsets[-1] + n + RATE // 10)
    for k, o in enumerate(offsets):
        x[o:o + n] += chirp(k)
    return x, offsets


def marker() -> np.ndarray:
    n = RATE * MARKER_MS // 1000
    t = np.arange(n) / RATE
    env = np.minimum(1.0, np.minimum(np.arange(n), n - np.arange(n)) / (RATE * 0.005))
    return 9000 * np.sin(2 * np.pi * 1000 * t) * env


def xcorr(x: np.ndarray, tmpl: np.ndarray) -> np.ndarray:
    """Normalized cross-correlation of `tmpl` at every lag of `x` (valid part)."""
    x = x.astype(np.float64)
    t = tmpl.astype(np.float64)
    n = len(x) + len(t)
    size = 1 << (n - 1).bit_length()
    c = np.fft.irfft(np.fft.rfft(x, size) * np.conj(np.fft.rfft(t, size)), size)[:len(x) - len(t) + 1]
    e = np.concatenate([[0.0], np.cumsum(x * x)])
    win = e[len(t):] - e[:-len(t)]
    return c / (np.sqrt(np.maximum(win, 1e-9)) * np.sqrt((t * t).sum()))


def find(x: np.ndarray, tmpl: np.ndarray, lo: int, hi: int) -> tuple[int, float]:
    """The lag in [lo, hi) where `tmpl` matches `x` best, and how well (−1…1)."""
    lo = max(0, lo)
    hi = min(len(x) - len(tmpl), hi)
    if hi <= lo:
        return -1, 0.0
    c = xcorr(x[lo:hi + len(tmpl)], tmpl)[:hi - lo]
    k = int(np.argmax(c))
    return lo + k, float(c[k])


# -- the wire ---------------------------------------------------------------------------------

class Sniffer(threading.Thread):
    """RTP datagrams on the loopback interface with the kernel's stamp (an AF_PACKET
    socket, SO_TIMESTAMPNS, CLOCK_REALTIME placed on CLOCK_MONOTONIC by an offset read at
    start; the one read at the end says whether it moved). The first copy seen is kept:
    on loopback a datagram's sending and its arrival are the same microsecond. SRTP
    leaves the RTP header in clear: the stamp is keyed by (SSRC, sequence number)."""

    SO_TIMESTAMPNS = 35

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, self.SO_TIMESTAMPNS, 1)
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.stop_flag = False
        self.packets: dict = {}  # (ssrc, seq) -> realtime ns (the first copy seen)
        self.offsets = [self.offset()]

    @staticmethod
    def offset() -> int:
        """CLOCK_REALTIME − CLOCK_MONOTONIC, from the tightest of a few readings."""
        best = None
        for _ in range(20):
            a = time.monotonic_ns()
            r = time.time_ns()
            b = time.monotonic_ns()
            if best is None or b - a < best[0]:
                best = (b - a, r - (a + b) // 2)
        return best[1]

    def run(self) -> None:
        while not self.stop_flag:
            try:
                data, anc, _, _ = self.sock.recvmsg(2048, 64)
            except socket.timeout:
                continue
            except OSError:
                break
            if len(data) < 20 or data[9] != 17:
                continue
            ihl = (data[0] & 15) * 4
            rtp = data[ihl + 8:]
            if len(rtp) < 12 or rtp[0] >> 6 != 2 or 192 <= rtp[1] <= 223:
                continue  # not RTP (STUN, DTLS) or RTCP
            stamp = None
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == self.SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", value[:16])
                    stamp = sec * 1_000_000_000 + nsec
            if stamp is None:
                continue
            seq, _ts, ssrc = struct.unpack("!HII", rtp[2:12])
            self.packets.setdefault((ssrc, seq), stamp)

    def stop(self) -> None:
        self.stop_flag = True
        self.join(2)
        self.sock.close()
        self.offsets.append(self.offset())

    def wire_ns(self, ssrc: int, seq: int):
        t = self.packets.get((ssrc, seq))
        return None if t is None else t - self.offsets[0]


# -- the call -----------------------------------------------------------------------------------

def run_call(a, d: str) -> dict:
    shutil.rmtree(d, ignore_errors=True)  # linnet appends to its events file
    os.makedirs(d)
    logdir = os.path.join(d, "room")
    # the talker (uplink chirps) and the stand-in's voice (marker, a pause for the
    # uplink, downlink chirps)
    up, up_off = click_track(a.clicks, RATE // 10)
    speech.write_wav(os.path.join(d, "uplink-chirps.wav"), up)
    up_len = len(up) / RATE
    down_lead = int((0.3 + LEAD_MS / 1000 + up_len + 1.0) * RATE)
    down, down_off = click_track(a.clicks, down_lead)
    m = marker()
    down[:len(m)] += m
    speech.write_wav(os.path.join(d, "downlink-voice.wav"), down)
    script = os.path.join(d, "talker.txt")
    with open(script, "w") as f:
        f.write("# the uplink chirps, after the stand-in's marker reached the speaker (bench/latency.py)\n")
        f.write(f"{os.path.join(d, 'uplink-chirps.wav')} onset {LEAD_MS}\n")
    room = dict(run_duplex.ROOMS["noecho"])
    run_duplex.asoundrc(os.path.join(d, ".asoundrc"), a.plugin, room, script, logdir, 1, extra="log_writes 1")
    sniffer = None
    if not a.no_sniff:
        try:
            sniffer = Sniffer()
            sniffer.start()
        except (PermissionError, OSError) as e:
            log(f"latency: no packet socket ({e}): arrival times are the stand-in's own stamps")
            sniffer = None
    standin_args = ["--latency-clicks", os.path.join(d, "downlink-voice.wav"), "--latency-clicks-after", "1.0",
                    "--record-sent", os.path.join(d, "sent.wav"), "--vad-onset-frames", "1000000"]
    call_s = 1.0 + len(down) / RATE + 20  # room to connect; the limit is never reached
    started = time.monotonic()
    procs = run_duplex.start_call(d, a, standin_args, shlex.split(a.flags), None, 1, int(call_s), stats_seconds=1)
    linnet_start_ns = time.monotonic_ns()
    reason = "limit"
    try:
        events_path = os.path.join(logdir, "events.jsonl")
        while time.monotonic() - started < call_s + 20:
            if procs["linnet"].p.poll() is not None:
                reason = f"linnet exited {procs['linnet'].p.returncode}"
                break
            ev = run_duplex.read_events(events_path)
            talk = [e for e in ev if e.get("ev") == "talk_start"]
            # The talker started 300 ms after the marker reached the speaker: the last
            # downlink chirp is heard then + its place in the voice + Linnet's delay.
            if talk and time.monotonic_ns() > talk[0]["anchor_t_ns"] + down_off[-1] / RATE * 1e9 + 1e9:
                reason = "every chirp played"
                break
            time.sleep(0.2)  # polling a log file the room writes
    finally:
        rc = run_duplex.stop_call(procs)
        if sniffer:
            sniffer.stop()
    log(f"latency: call ended ({reason}, linnet exit {rc}, {time.monotonic() - started:.0f} s)")
    return {"up_offsets": up_off, "down_offsets": down_off, "sniffer": sniffer, "linnet_start_ns": linnet_start_ns,
            "reason": reason, "exit": rc}


# -- the analysis ---------------------------------------------------------------------------------

def unwrap32(ts: np.ndarray) -> np.ndarray:
    d = np.diff(ts.astype(np.int64))
    d = (d + (1 << 31)) % (1 << 32) - (1 << 31)
    return np.concatenate([[0], np.cumsum(d)]) + int(ts[0])


def analyse(d: str, call: dict) -> dict:
    logdir = os.path.join(d, "room")
    with open(os.path.join(logdir, "room.json")) as f:
        t0 = json.load(f)["t0_ns"]
    ev = run_duplex.read_events(os.path.join(logdir, "events.jsonl"))
    with open(os.path.join(d, "standin.json")) as f:
        rep = json.load(f)
    st = rep["standin"]
    sniffer = call["sniffer"]
    out: dict = {"wire_clock": "kernel (AF_PACKET on lo)" if sniffer else "the stand-in's stamps"}

    def t_of(i: float) -> float:
        return t0 + i * 1e9 / RATE

    def idx(t: float) -> int:
        return int(round((t - t0) * RATE / 1e9))

    # -- uplink ----------------------------------------------------------------------
    talk = next(e for e in ev if e.get("ev") == "talk_start")
    # every start of the capture stream (again after an overrun's recovery): each
    # starts a period grid of its own
    caps = [e for e in ev if e.get("ev") == "start" and e.get("stream") == "capture"]
    up = speech.read_wav(os.path.join(d, "uplink.wav"))[0]
    arr = np.array(st["arrivals"], dtype=np.int64)  # index, n, arrival, seq, ts, ssrc
    wire = arr[:, 2].astype(np.float64).copy()
    lag = []
    if sniffer:
        for k in range(len(arr)):
            w = sniffer.wire_ns(int(arr[k, 5]), int(arr[k, 3]))
            if w is not None:
                lag.append(arr[k, 2] - w)
                wire[k] = w
    # The packets' true ends: within one run of the capture stream, the first
    # packet's end E plus their RTP time; E is a capture period boundary at most one
    # period before the earliest departure of that run.
    ts = unwrap32(arr[:, 4])
    period_ns = PERIOD * 1e9 / RATE
    ends = np.full(len(arr), np.nan)
    seg = np.searchsorted(np.array([e["t_ns"] for e in caps], dtype=np.float64), wire) - 1
    for g in range(len(caps)):
        k = np.flatnonzero(seg == g)
        if not len(k):
            continue
        rel = wire[k] - (ts[k] - ts[k[0]]) * 1e9 / RATE
        grid0 = t_of(caps[g]["index"])
        e0 = grid0 + np.floor((float(rel.min()) - grid0) / period_ns) * period_ns
        ends[k] = e0 + (ts[k] - ts[k[0]]) * 1e9 / RATE
    ups = []
    for k, o in enumerate(call["up_offsets"]):
        m = talk["mic_index"] + o
        t_on = t_of(m)
        # What arrived within 200 ms of the onset: it cannot hold the next chirp
        # (captured SPACING_MS later), and the chirp's own packet is among it.
        rows = np.flatnonzero((arr[:, 2] >= t_on) & (arr[:, 2] <= t_on + 0.2e9))
        if not len(rows):
            continue
        lo, hi = int(arr[rows[0], 0]) - FRAME, int(arr[rows[-1], 0] + arr[rows[-1], 1])
        pos, score = find(up, chirp(k), lo, hi)
        if score < 0.4:  # the canceller's 16 kHz path and Opus reshape it: 0.55–0.96 seen
            continue
        r = int(np.searchsorted(arr[:, 0], pos, side="right") - 1)
        q = pos - int(arr[r, 0])
        n = int(arr[r, 1])
        last = t_on + (n - q) * 1e9 / RATE
        split = not np.isnan(ends[r])
        ups.append({"k": k, "score": round(score, 3), "q": q, "onset_to_wire": (wire[r] - t_on) / 1e6,
                    "added": (wire[r] - last) / 1e6, "processing": (wire[r] - ends[r]) / 1e6 if split else None,
                    "algorithmic": (ends[r] - last) / 1e6 if split else None,
                    "standin_stamp_to_wire": (arr[r, 2] - wire[r]) / 1e6})
    out["uplink"] = ups
    out["standin_lag_ms"] = [x / 1e6 for x in lag]

    # -- downlink ------------------------------------------------------------------------
    sent_x = speech.read_wav(os.path.join(d, "sent.wav"))[0]
    sent = np.array(st["sent"], dtype=np.int64)  # index, n, send, seq, ts, ssrc
    spk = speech.read_wav(os.path.join(logdir, "speaker.wav"))[0]
    writes = [e for e in ev if e.get("ev") == "write"]
    w_index = np.array([e["index"] for e in writes], dtype=np.int64)
    stats = [e for e in run_duplex.read_events(os.path.join(d, "linnet-events.jsonl")) if e.get("type") == "stats"]
    stats_t = [call["linnet_start_ns"] + e["t"] * 1e9 for e in stats]
    loud = np.flatnonzero(np.abs(sent_x) > 3000)
    downs = []
    if len(loud):
        mark = int(loud[0])  # the marker's start in the decoded stream (Opus delay included)
        for k, o in enumerate(call["down_offsets"]):
            guess = mark + o
            tmpl = chirp(k)
            pos, score = find(sent_x, tmpl, guess - 240, guess + 960)
            if score < 0.5:
                continue
            r = int(np.searchsorted(sent[:, 0], pos, side="right") - 1)
            q = pos - int(sent[r, 0])
            w = sniffer.wire_ns(int(sent[r, 5]), int(sent[r, 3])) if sniffer else None
            t_wire = float(w if w is not None else sent[r, 2])
            heard_tmpl = sent_x[pos:pos + len(tmpl)]
            h, hscore = find(spk, heard_tmpl, idx(t_wire), idx(t_wire + 0.95e9))
            if hscore < 0.9:
                continue
            h0 = h - q  # the packet's first sample on the speaker
            t_h0 = t_of(h0)
            total = (t_h0 - t_wire) / 1e6
            j = int(np.searchsorted(w_index, h0, side="right") - 1)
            device = linnet = None
            if j >= 0 and h0 < w_index[j] + writes[j]["frames"]:
                device = (t_h0 - writes[j]["t_ns"]) / 1e6
                linnet = (writes[j]["t_ns"] - t_wire) / 1e6
            before = [i for i, t in enumerate(stats_t) if t <= t_wire and "jitter_target_ms" in stats[i]]
            target = stats[before[-1]]["jitter_target_ms"] if before else None
            downs.append({"k": k, "score": round(hscore, 4), "q": q, "arrival_to_speaker": total,
                          "onset_heard": total + q * 1000 / RATE, "jitter_target": target,
                          "beyond_jitter_target": None if target is None else total - target,
                          "device": device, "linnet": linnet,
                          "standin_stamp_to_wire": (sent[r, 2] - t_wire) / 1e6})
    out["downlink"] = downs
    # A stall of the machine (every process stopped at once: seen here, ~1 s, the
    # stand-in's sends and Linnet's audio threads alike) leaves the jitter buffer
    # holding what piled up, and the figures after it show that, not the path.
    stalls = []
    for name in ("sent", "arrivals"):
        t = np.array([row[2] for row in st.get(name, [])], dtype=np.float64)
        for i in np.flatnonzero(np.diff(t) > 100e6):
            stalls.append(f"the stand-in's {name} stopped for {(t[i + 1] - t[i]) / 1e6:.0f} ms")
    for e in ev:
        if e.get("ev") in ("underrun", "overrun", "late_write"):
            stalls.append(f"the room's {e['stream']} {e['ev']} at {(e['t_ns'] - t0) / 1e9:.1f} s")
    out["disturbed"] = stalls
    out["underruns"] = sum(1 for e in ev if e.get("ev") in ("underrun", "late_write"))
    out["overruns"] = sum(1 for e in ev if e.get("ev") == "overrun")
    out["stats_last"] = stats[-1] if stats else {}
    if sniffer:
        out["clock_offset_drift_us"] = (sniffer.offsets[-1] - sniffer.offsets[0]) / 1e3
    return out


def pct(xs: list, p: float) -> float:
    return float(np.percentile(np.array(xs, dtype=np.float64), p)) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("linnet", nargs="?", default=os.path.join(ROOT, "build/host/linnet"))
    ap.add_argument("--clicks", type=int, default=40, help="chirps each way (40)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build/latency"))
    ap.add_argument("--flags", default="--duplex full",
                    help="`linnet run` options (default \"--duplex full\": see the module doc); e.g. \"--no-aec\"")
    ap.add_argument("--no-sniff", action="store_true", help="use the stand-in's stamps, not the kernel's")
    ap.add_argument("--json", help="write every figure and every chirp here")
    ap.add_argument("--attempts", type=int, default=2,
                    help="calls at most: a call the machine stalled in (room xruns, the stand-in stopped) is made again")
    a = ap.parse_args(argv)
    if not os.access(a.linnet, os.X_OK):
        log(f"error: no linnet binary at {a.linnet}")
        return 69
    a.linnet = os.path.abspath(a.linnet)
    a.out = os.path.abspath(a.out)
    a.interop_python = sys.executable
    a.plugin = subprocess.run([os.path.join(ROOT, "Tests/Room/build.sh")], check=True, text=True,
                              stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]
    t_all = time.monotonic()
    for attempt in range(1, a.attempts + 1):
        call = run_call(a, a.out)
        if call["reason"].startswith("linnet exited") or not os.path.exists(os.path.join(a.out, "standin.json")):
            log(f"latency: the call failed ({call['reason']}): see {a.out}/linnet.log")
            return 1
        r = analyse(a.out, call)
        if not r["disturbed"] or attempt == a.attempts:
            break
        log(f"latency: call {attempt} was disturbed ({'; '.join(r['disturbed'][:3])}): calling again")
    r["attempts"] = attempt
    ups, downs = r["uplink"], r["downlink"]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({k: v for k, v in r.items()}, f, indent=1, default=str)
    with open(os.path.join(a.out, "latency.json"), "w") as f:
        json.dump(r, f, indent=1, default=str)

    def col(rows, key):
        return [x[key] for x in rows if x.get(key) is not None]

    figures = [
        ("uplink_onset_to_wire", col(ups, "onset_to_wire")),
        ("uplink_added", col(ups, "added")),
        ("uplink_processing", col(ups, "processing")),
        ("uplink_algorithmic", col(ups, "algorithmic")),
        ("downlink_arrival_to_speaker", col(downs, "arrival_to_speaker")),
        ("downlink_beyond_jitter_target", col(downs, "beyond_jitter_target")),
        ("downlink_jitter_target", col(downs, "jitter_target")),
        ("downlink_linnet", col(downs, "linnet")),
        ("downlink_device", col(downs, "device")),
    ]
    for name, xs in figures:
        print(f"BENCH latency_{name}_ms_median {pct(xs, 50):.1f} ms")
        print(f"BENCH latency_{name}_ms_p95 {pct(xs, 95):.1f} ms")
    print(f"BENCH latency_uplink_chirps_found {len(ups)} of {a.clicks}")
    print(f"BENCH latency_downlink_chirps_found {len(downs)} of {a.clicks}")

    def m(key, rows):
        xs = col(rows, key)
        return f"median {pct(xs, 50):5.1f}, p95 {pct(xs, 95):5.1f}, min {min(xs) if xs else float('nan'):5.1f}, max {max(xs) if xs else float('nan'):5.1f} ms"
    print(f"\nlatency: {a.linnet} {a.flags} ({'10 ms periods, 20 ms frames, loopback, no loss'}), wire times: {r['wire_clock']}")
    print(f"  uplink, {len(ups)} chirps (microphone → RTP on the wire)")
    print(f"    onset → wire                 {m('onset_to_wire', ups)}   (mouth to wire: framing included)")
    print(f"    frame's last sample → wire   {m('added', ups)}   (what Linnet adds beyond the 20 ms frame)")
    print(f"      algorithmic (Opus, hooks)  {m('algorithmic', ups)}")
    print(f"      processing                 {m('processing', ups)}   (period wake-up → capture → hooks → loop → Opus → SRTP → sendto)")
    print(f"  downlink, {len(downs)} chirps (RTP on the wire → speaker)")
    print(f"    arrival → first sample heard {m('arrival_to_speaker', downs)}")
    print(f"    jitter buffer target         {m('jitter_target', downs)}   (Linnet's stats line)")
    print(f"    beyond the jitter target     {m('beyond_jitter_target', downs)}   (issue 33's goal: ≤ 30 ms)")
    print(f"      Linnet: wire → device write {m('linnet', downs)}   (jitter buffer, decode, Linnet's playback queues)")
    print(f"      device: write → heard       {m('device', downs)}   (the ALSA buffer: snd_pcm_delay at the write)")
    lin = col(downs, "linnet")
    if lin:
        held = pct(lin, 50) - QUEUED_MS
        print(f"      of Linnet's part, about {QUEUED_MS} ms is its ring by design (a 10 ms piece waits about a period\n"
              f"      for the playback thread's next take), so the jitter buffer held the packet\n"
              f"      about {held:.1f} ms (inferred, not measured: {held - pct(col(downs, 'jitter_target'), 50):+.1f} ms against its target)")
    if r["standin_lag_ms"]:
        lag = r["standin_lag_ms"]
        print(f"  the stand-in's stamps trail the kernel's by median {pct(lag, 50):.2f}, p95 {pct(lag, 95):.2f} ms (not counted above)")
    last = r["stats_last"]
    print(f"  linnet: capture_xruns {last.get('capture_xruns')}, playback_xruns {last.get('playback_xruns')}, "
          f"packets_lost {last.get('packets_lost')}, concealed {last.get('concealed')}")
    print(f"  room: {r['underruns']} underruns/late writes, {r['overruns']} overruns; call: {call['reason']}, "
          f"linnet exit {call['exit']}; files in {a.out}; {time.monotonic() - t_all:.0f} s in all")
    if r["disturbed"]:
        print(f"  WARNING: this call was disturbed ({'; '.join(r['disturbed'][:3])}): the figures show the aftermath")
    elif r["attempts"] > 1:
        print(f"  (call {r['attempts']}: the one before was disturbed by a stall of the machine)")
    ok = len(ups) >= a.clicks * 3 // 4 and len(downs) >= a.clicks * 3 // 4
    if not ok:
        log("latency: too few chirps found: the figures above are not to be trusted")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
