#!/usr/bin/env python3
"""The real-condition judge: "talk over the assistant and be understood".

Runs the whole `linnet run` (OpenAI route, voice mode, no button, the binary's own
defaults plus a variant's flags) in real time against the Realtime stand-in
(Tests/Interop/realtime_standin.py) through the impairment relay
(Tests/Interop/relay.py) and the room plugin (Tests/Room), with a talker who makes
short requests while or just after the assistant's replies play, and judges what
each side understood with pocketsphinx (Tests/Speech/speech.py):

- uplink WER: what the provider received, cut into one window per request (the
  talker's CLOCK_MONOTONIC start/end from the room's log, mapped onto the stand-in's
  recording through its frames' arrival times), against the request's words;
- downlink WER: what the speaker played, one segment per reply (found on the room's
  speaker recording after the stand-in started sending that reply), against the words
  of the reply that were played before any cut: a word counts once the played time
  reaches its middle, word times from a forced alignment of the reply's own WAV
  (speech.word_ends: pocketsphinx, espeak-ng prefixes where it skips a word);
- the clean baseline: the recogniser on the source WAVs;
- per barge-in (a request that starts while a reply is audible): the time from the
  user's voice at the microphone (talker's first loud sample) to the speaker's last
  loud sample of that reply; whether the reply was cut;
- per `conversation.item.truncate`: the audio_end_ms Linnet sent against how much of
  that item the speaker played (room log) and the stand-in had sent.

    run_duplex.py --linnet .build/debug/linnet [--variants default,full,aec]
                  [--rooms noecho,handset,speaker] [--losses 0,10] [--out DIR] [--ci]

It prints `BENCH duplex_wer_<room>_<loss>_<up|down>[_<variant>] <value> wer` lines
(the default variant without suffix), the tables, and writes DIR/results.json. --ci
runs one short cell (no-echo room, no loss, three requests after the replies) and
exits 1 unless the call connected, audio went both ways and the recogniser
understood most of the uplink and downlink.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import speech  # noqa: E402

RATE = speech.RATE
LOUD = 200  # |sample| above this (−44 dBFS peak) is sound on the speaker/talker tracks

# Echo levels are set relative to the talker: the path gain G (energy, absolute, what
# the plugin takes) is chosen so the echo of a reply at its level (speech.LEVEL_DBFS
# "assistant", played at unity gain) arrives `echo_vs_talker_db` against the talker.
ROOMS = {
    "noecho": {"echo_vs_talker_db": None, "echo_delay_ms": 20, "rt60": 0.2, "noise_dbfs": -70,
               "what": "no echo (headset / file-like)"},
    "handset": {"echo_vs_talker_db": -20, "echo_delay_ms": 20, "rt60": 0.2, "noise_dbfs": -70,
                "what": "handset: echo 20 dB below the talker, 20 ms, RT60 0.2 s"},
    "speaker": {"echo_vs_talker_db": 0, "echo_delay_ms": 120, "rt60": 0.35, "noise_dbfs": -65,
                "what": "speaker board: echo as loud as the talker, 120 ms, RT60 0.35 s"},
}
# Silence that ends a reply on the speaker (the room's activity_gap_ms): longer than
# the longest pause inside a reply sentence (160 ms, measured on the espeak WAVs).
ACTIVITY_GAP_MS = 220
VARIANTS = {"default": [], "full": ["--duplex", "full"], "aec": ["--aec"], "aec-full": ["--aec", "--duplex", "full"],
            # barge-in-ms candidates, for choosing its default (onset → speaker silent)
            "barge100": ["--barge-in-ms", "100"], "barge140": ["--barge-in-ms", "140"],
            # Push-to-talk (the button stood in for by SIGUSR1, pressed by the talker):
            # a session open from the start, against sessions on demand, where every
            # request finds no session and its press starts one (idle-seconds 5 closes
            # it in the PTT_GAP_MS pause after each reply).
            "ptt": ["--turn-detection", "ptt"],
            "on-demand": ["--turn-detection", "ptt", "--session", "on-demand", "--idle-seconds", "5"]}
PTT_VARIANTS = ("ptt", "on-demand")
# The stand-in's own arguments for a variant. "own-flag": Linnet's defaults against a
# server VAD that starts speech only after 500 ms of loud frames, so every barge-in is
# cut by Linnet's own voice flag (barge-in-ms), not by the provider's
# output_audio_buffer.cleared: onset → speaker silent is then Linnet's alone.
VARIANTS["own-flag"] = []
STANDIN_VARIANTS = {"own-flag": ["--vad-onset-frames", "25"]}
# Push-to-talk talkers: the first request PTT_FIRST_S after the microphone starts, each
# next one PTT_GAP_MS after the reply to the last ended (longer than idle-seconds 5, so
# on demand each request starts its own session); the press comes PTT_LEAD_MS before
# the voice, the release PTT_TAIL_MS after it, as a person's thumb does.
PTT_FIRST_S = 3
PTT_GAP_MS = 6500
PTT_LEAD_MS = 300
PTT_TAIL_MS = 250
ANSWER_DELAY_S = 1.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- assets --------------------------------------------------------------------------------

def assets(cache: str) -> dict:
    """Every sentence as a WAV (48 kHz), the replies' word ends, cached by content."""
    key = hashlib.sha256(json.dumps([speech.USER, speech.ASSISTANT, speech.VOICES, speech.SPEED,
                                     speech.PITCH, speech.LEVEL_DBFS, 3]).encode()).hexdigest()[:16]
    d = os.path.join(cache, key)
    meta_path = os.path.join(d, "assets.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            return json.load(f)
    os.makedirs(d, exist_ok=True)
    log(f"duplex: synthesizing the sentences into {d}")
    meta: dict = {"dir": d, "user": [], "assistant": []}
    for role, sents in (("user", speech.USER), ("assistant", speech.ASSISTANT)):
        for k, text in enumerate(sents):
            x = speech.synth(text, role)
            path = os.path.join(d, f"{role}{k:02d}.wav")
            speech.write_wav(path, x)
            loud = np.flatnonzero(np.abs(x) > LOUD)
            entry = {"text": text, "wav": path, "seconds": len(x) / RATE,
                     "first_loud": int(loud[0]) if len(loud) else 0,
                     "last_loud": int(loud[-1]) if len(loud) else 0}
            if role == "assistant":
                entry["word_ends"] = speech.word_ends(text, role, x)
            meta[role].append(entry)
    with open(os.path.join(d, "replies.json"), "w") as f:
        json.dump({"greeting": {"wav": meta["assistant"][0]["wav"], "text": meta["assistant"][0]["text"]},
                   "replies": [{"wav": a["wav"], "text": a["text"]} for a in meta["assistant"][1:]]}, f, indent=1)
    meta["replies_json"] = os.path.join(d, "replies.json")
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def talker_script(meta: dict, n: int, ci: bool) -> str:
    """The requests' timing: the first 250 ms after the greeting ends; then, relative
    to the reply to the previous request, every other one ~1 s before it ends (onset +
    its length − 1 s) and the others 220–300 ms after it ends (the room declares a reply
    ended after ACTIVITY_GAP_MS of silence: espeak's own pauses inside a reply reach
    160 ms, so a shorter wait would start inside a reply). --ci: the same, three requests:
    the second cuts in over the first reply."""
    lines = ["# request  rule  value(ms)   (generated by run_duplex.py)"]
    after = [220, 300, 250, 220]
    for k in range(n):
        wav = meta["user"][k]["wav"]
        if k == 0:
            lines.append(f"{wav} offset 250")
            continue
        reply = meta["assistant"][k]  # the reply to request k-1 (0 is the greeting)
        if k % 2 == 1:
            loud_ms = (reply["last_loud"] - reply["first_loud"]) / RATE * 1000
            lines.append(f"{wav} onset {max(200, int(loud_ms - 1000))}")
        else:
            lines.append(f"{wav} offset {after[k % len(after)]}")
    return "\n".join(lines) + "\n"


def talker_script_ptt(meta: dict, n: int) -> str:
    """Push-to-talk requests: each after the last reply, with a pause (PTT_GAP_MS)."""
    lines = ["# request  rule  value (at: s, offset: ms)   (generated by run_duplex.py, push-to-talk)"]
    for k in range(n):
        wav = meta["user"][k]["wav"]
        lines.append(f"{wav} at {PTT_FIRST_S}" if k == 0 else f"{wav} offset {PTT_GAP_MS}")
    return "\n".join(lines) + "\n"


def replies_without_greeting(meta: dict) -> str:
    """The stand-in's replies with no greeting: with push-to-talk nobody is greeted, and
    on demand every session would otherwise greet again."""
    path = os.path.join(meta["dir"], "replies-no-greeting.json")
    if not os.path.exists(path):
        with open(path, "w") as f:
            json.dump({"greeting": None, "replies": [{"wav": a["wav"], "text": a["text"]} for a in meta["assistant"][1:]]},
                      f, indent=1)
    return path


class Presser:
    """The talker's thumb on the button (SIGUSR1 to Linnet toggles push-to-talk): the
    press PTT_LEAD_MS before each request's planned start, computed from the room's
    events as the room computes the start itself (the capture's start plus PTT_FIRST_S
    for the first; the end of the reply after the previous request plus PTT_GAP_MS for
    the others), and the release PTT_TAIL_MS after the request's end. The room's event
    log is read incrementally."""

    def __init__(self, events_path: str, n: int, pid: int) -> None:
        self.path = events_path
        self.n = n
        self.pid = pid
        self.pos = 0
        self.partial = ""
        self.k = 0  # the next request to press for
        self.press_at: Optional[int] = None
        self.release_at: Optional[int] = None
        self.last_talk_end: Optional[int] = None
        self.reply_on_after_end: Optional[int] = None
        self.log: list = []  # {"k", "press_ns", "release_ns"}

    def events(self) -> list:
        try:
            with open(self.path) as f:
                f.seek(self.pos)
                data = f.read()
                self.pos = f.tell()
        except FileNotFoundError:
            return []
        data = self.partial + data
        lines = data.split("\n")
        self.partial = lines.pop()
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def toggle(self) -> None:
        os.kill(self.pid, signal.SIGUSR1)

    def step(self) -> None:
        for e in self.events():
            ev = e.get("ev")
            if ev == "start" and e.get("stream") == "capture" and self.k == 0 and self.press_at is None:
                self.press_at = e["t_ns"] + int(PTT_FIRST_S * 1e9) - PTT_LEAD_MS * 1_000_000
            elif ev == "talk_start" and e.get("k") == self.k and self.k < self.n:
                # The room started it without its anchor (its timeout): pressed late, and
                # said so in the log (the words before the press are the harness's loss).
                self.toggle()
                self.log.append({"k": self.k, "press_ns": time.monotonic_ns(), "release_ns": None, "late": True})
                self.k += 1
                self.press_at = None
            elif ev == "talk_end" and self.log and e.get("k") == self.log[-1]["k"]:
                self.release_at = e["t_ns"] + PTT_TAIL_MS * 1_000_000
                self.last_talk_end = e["t_ns"]
                self.reply_on_after_end = None
            elif ev == "speaker_on" and self.last_talk_end is not None and e["t_ns"] >= self.last_talk_end:
                self.reply_on_after_end = self.reply_on_after_end or e["t_ns"]
            elif (ev == "speaker_off" and self.reply_on_after_end is not None and self.press_at is None
                  and self.k < self.n and self.release_at is None):
                self.press_at = e["t_ns"] + (PTT_GAP_MS - PTT_LEAD_MS) * 1_000_000
                self.last_talk_end = None
                self.reply_on_after_end = None
        now = time.monotonic_ns()
        if self.press_at is not None and now >= self.press_at and self.k < self.n:
            self.toggle()
            self.log.append({"k": self.k, "press_ns": now, "release_ns": None})
            self.k += 1
            self.press_at = None
        if self.release_at is not None and now >= self.release_at:
            self.toggle()
            self.log[-1]["release_ns"] = now
            self.release_at = None


# -- one call --------------------------------------------------------------------------------

class Proc:
    def __init__(self, argv: list, cwd: str, name: str, env: Optional[dict] = None, stdout_pipe: bool = False) -> None:
        self.name = name
        self.err = open(os.path.join(cwd, f"{name}.log"), "w")
        self.p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE if stdout_pipe else self.err, stderr=self.err,
                                  text=True)

    def ready_line(self, timeout: float = 60.0) -> list:
        """Waits for the READY line on stdout (select on the pipe, no sleeping)."""
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(self.p.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not sel.select(timeout=deadline - time.monotonic()):
                break
            line = self.p.stdout.readline()
            if not line:
                break
            if line.startswith("READY"):
                return line.split()[1:]
        raise RuntimeError(f"{self.name} did not get ready (see {self.err.name})")

    def stop(self, sig=signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.err.close()
        return self.p.returncode


def read_events(path: str) -> list:
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except FileNotFoundError:
        pass
    return out


def asoundrc(path: str, plugin: str, room: dict, script: str, logdir: str, seed: int, extra: str = "") -> dict:
    """HOME/.asoundrc naming both PCMs of one room (`extra`: more room parameters)."""
    gain = "-inf"
    if room["echo_vs_talker_db"] is not None:
        g = room["echo_vs_talker_db"] - (speech.LEVEL_DBFS["assistant"] - speech.LEVEL_DBFS["user"])
        gain = f"{g:g}"
    params = (f'room "duplex" echo_delay_ms {room["echo_delay_ms"]} rt60 {room["rt60"]} '
              f'echo_gain_db "{gain}" noise_dbfs {room["noise_dbfs"]} seed {seed} '
              f'activity_gap_ms {ACTIVITY_GAP_MS} talker_script "{script}" log_dir "{logdir}"' + (f" {extra}" if extra else ""))
    with open(path, "w") as f:
        f.write(f'pcm_type.linnetroom {{ lib "{plugin}" }}\n')
        f.write(f"pcm.roomspk {{ type linnetroom {params} }}\n")
        f.write(f"pcm.roommic {{ type linnetroom {params} }}\n")
    return {"echo_gain_db": gain}


def start_call(cell_dir: str, a, standin_args: list, flags: list, relay_cmds: Optional[list], seed: int,
               seconds: int, stats_seconds: int = 5) -> dict:
    """Starts one call on the room whose .asoundrc is in `cell_dir` (Linnet's HOME): the
    stand-in (recording to uplink.wav, reporting to standin.json, plus `standin_args`),
    the relay with `relay_cmds` (None: no relay, Linnet calls the stand-in directly) and
    `linnet run` (OpenAI route, room PCMs, events, status, `seconds`, `flags`). Returns
    {"standin", "relay", "linnet"} (Procs, "relay" None without one); whatever was
    started is stopped again if a later step fails. End it with stop_call."""
    token = os.path.join(cell_dir, "token")
    with open(token, "w") as f:
        f.write("device-secret\n")
    conf = os.path.join(cell_dir, "linnet.conf")
    open(conf, "w").close()
    procs: dict = {"standin": None, "relay": None, "linnet": None}
    procs["standin"] = Proc([a.interop_python, os.path.join(ROOT, "Tests/Interop/realtime_standin.py"),
                             "--listen", "127.0.0.1:0", "--record", os.path.join(cell_dir, "uplink.wav"),
                             "--report", os.path.join(cell_dir, "standin.json"),
                             "--ephemeral", "--token", "device-secret"] + standin_args,
                            cell_dir, "standin", stdout_pipe=True)
    try:
        port = procs["standin"].ready_line()[0]
        if relay_cmds is not None:
            procs["relay"] = Proc([sys.executable, os.path.join(ROOT, "Tests/Interop/relay.py"),
                                   "--upstream", f"http://127.0.0.1:{port}", "--seed", str(seed)] + relay_cmds,
                                  cell_dir, "relay", stdout_pipe=True)
            port = procs["relay"].ready_line()[0]
        base = f"http://127.0.0.1:{port}"
        env = dict(os.environ, HOME=cell_dir)
        argv = [a.linnet, "run", "--config", conf, "--openai", "--token-url", base + "/token",
                "--openai-url", base + "/v1/realtime/calls", "--token-file", token,
                "--capture", "roommic", "--playback", "roomspk",
                "--events", os.path.join(cell_dir, "linnet-events.jsonl"),
                "--status-file", os.path.join(cell_dir, "status.json"),
                "--seconds", str(seconds), "--max-attempts", "3", "--stats-seconds", str(stats_seconds)] + flags
        with open(os.path.join(cell_dir, "linnet.argv"), "w") as f:
            f.write(" ".join(argv) + "\n")
        procs["linnet"] = Proc(argv, cell_dir, "linnet", env=env)
    except BaseException:
        stop_call(procs)
        raise
    return procs


def stop_call(procs: dict) -> Optional[int]:
    """SIGTERM to Linnet (its exit status is returned), then the stand-in (which writes
    its report) and the relay."""
    rc = procs["linnet"].stop(signal.SIGTERM) if procs["linnet"] else None
    if procs["standin"]:
        procs["standin"].stop(signal.SIGTERM)
    if procs["relay"]:
        procs["relay"].stop(signal.SIGTERM)
    return rc


def run_call(cell_dir: str, a, meta: dict, room: dict, loss: float, flags: list, n: int, seed: int,
             ptt: bool = False, standin_extra: Optional[list] = None) -> dict:
    os.makedirs(cell_dir, exist_ok=True)
    logdir = os.path.join(cell_dir, "room")
    shutil.rmtree(logdir, ignore_errors=True)
    script = os.path.join(cell_dir, "talker.txt")
    with open(script, "w") as f:
        f.write(talker_script_ptt(meta, n) if ptt else talker_script(meta, n, a.ci))
    # Push-to-talk: a request waits for the reply before it (a session on demand under
    # loss can take seconds to come), not the room's default 10 s.
    room_info = asoundrc(os.path.join(cell_dir, ".asoundrc"), a.plugin, room, script, logdir, seed,
                         extra="talk_timeout_ms 30000" if ptt else "")
    started = time.monotonic()
    relay_cmds = [f"loss {loss / 100:g}"] if loss else []
    replies = replies_without_greeting(meta) if ptt else meta["replies_json"]
    # The service's set-up time (OpenAI's /calls answer takes about a second): what a
    # session on demand has to catch up on.
    delay = ["--answer-delay", f"{ANSWER_DELAY_S:g}"] if ptt else []
    procs = start_call(cell_dir, a, ["--replies", replies] + delay + (standin_extra or []), flags, relay_cmds, seed,
                       a.call_limit)
    linnet = procs["linnet"]
    events_path = os.path.join(logdir, "events.jsonl")
    presser = Presser(events_path, n, linnet.p.pid) if ptt else None
    try:
        # Wait for the talker's last request to end and the reply after it to finish
        # (speaker quiet), or for a generous limit; polling the room's log file.
        last_end_ns = None
        reason = "limit"
        polled = 0.0
        while time.monotonic() - started < a.call_limit + 30:
            if presser is not None:
                presser.step()
            if time.monotonic() - polled < 0.2:
                time.sleep(0.01)  # the presser's resolution; the log below every 0.2 s
                continue
            polled = time.monotonic()
            if linnet.p.poll() is not None:
                reason = f"linnet exited {linnet.p.returncode}"
                break
            ev = read_events(events_path)
            ends = [e for e in ev if e.get("ev") == "talk_end" and e.get("k") == n - 1]
            if ends:
                last_end_ns = ends[0]["t_ns"]
                after = [e for e in ev if e["t_ns"] > last_end_ns]
                on = [e for e in after if e.get("ev") == "speaker_on"]
                off = [e for e in after if e.get("ev") == "speaker_off"]
                # the reply after the last request played out, and 1.5 s of quiet after it
                if on and off and off[-1]["t_ns"] > on[-1]["t_ns"] and time.monotonic_ns() > off[-1]["t_ns"] + 1.5e9:
                    reason = "last reply played"
                    break
                if not on and time.monotonic_ns() > last_end_ns + 12e9:
                    reason = "no reply after the last request"
                    break
        log(f"duplex: {os.path.basename(cell_dir)}: ending the call ({reason}, {time.monotonic() - started:.0f} s)")
    finally:
        rc = stop_call(procs)
    return {"linnet_exit": rc, "end_reason": reason, "seconds": round(time.monotonic() - started, 1),
            "presses": presser.log if presser else None, **room_info}


# -- the judges --------------------------------------------------------------------------------

def wav(path: str) -> np.ndarray:
    x, rate = speech.read_wav(path)
    assert rate == RATE, path
    return x


def judge(cell_dir: str, meta: dict, n: int, recs: dict) -> dict:
    logdir = os.path.join(cell_dir, "room")
    with open(os.path.join(logdir, "room.json")) as f:
        room = json.load(f)
    t0 = room["t0_ns"]
    ev = read_events(os.path.join(logdir, "events.jsonl"))
    spk = wav(os.path.join(logdir, "speaker.wav"))
    talk = wav(os.path.join(logdir, "talker.wav"))
    echo = wav(os.path.join(logdir, "echo.wav"))
    try:
        with open(os.path.join(cell_dir, "standin.json")) as f:
            rep = json.load(f)
    except FileNotFoundError:
        rep = {}
    sessions = rep.get("sessions") or []
    # Every session's report, on one time axis (on demand there is one per request).
    st: dict = {"replies": [], "truncations": [], "interruptions": [], "client_events": []}
    for sess_ in sessions:
        for key in st:
            st[key] += (sess_.get("standin") or {}).get(key, [])
    st["replies"].sort(key=lambda r: r.get("audio_start_ns") or 0)
    up = wav(os.path.join(cell_dir, "uplink.wav")) if os.path.exists(os.path.join(cell_dir, "uplink.wav")) else np.zeros(0, np.int16)
    arrivals = np.array(rep.get("standin", {}).get("arrivals") or [[0, 0, 0, -1, -1, -1]], dtype=np.int64)
    streams = uplink_streams(arrivals)

    def idx(t_ns: float) -> int:
        return int(round((t_ns - t0) * RATE / 1e9))

    def t_of(i: float) -> float:
        return t0 + i * 1e9 / RATE

    def up_index(t_ns: float) -> int:
        """The stand-in's recording index of what the microphone heard at t: within a
        stream (an SSRC: one session) the recording runs on the sender's RTP clock, and
        the stream's anchor is when its first sample would have arrived with no backlog
        (see uplink_streams); before a stream, its first sample; after them all, the end."""
        for s_ in streams:
            if t_ns < s_["anchor_ns"]:
                return s_["first"]
            i = s_["first"] + int((t_ns - s_["anchor_ns"]) * RATE / 1e9)
            if i < s_["end"]:
                return i
        return len(up)

    # the requests, as the talker said them
    starts = {e["k"]: e for e in ev if e.get("ev") == "talk_start"}
    ends = {e["k"]: e for e in ev if e.get("ev") == "talk_end"}
    requests = []
    for k in range(n):
        if k not in starts:
            requests.append({"k": k, "said": False})
            continue
        s = starts[k]
        e = ends.get(k)
        m0 = s["mic_index"]
        m1 = e["mic_index"] if e else m0 + s["samples"]
        loud = np.flatnonzero(np.abs(talk[m0:m1]) > LOUD)
        voice_on = m0 + (int(loud[0]) if len(loud) else 0)
        voice_off = m0 + (int(loud[-1]) if len(loud) else 0)
        requests.append({"k": k, "said": True, "rule": s.get("rule"), "late_us": s.get("late_us"),
                         "start_ns": s["t_ns"], "end_ns": t_of(m1), "voice_on": voice_on, "voice_off": voice_off})

    # uplink: one window per request
    up_pairs = []
    for i, r in enumerate(requests):
        ref = speech.USER[r["k"]].split()
        if not r["said"]:
            up_pairs.append((ref, []))
            r["up_hyp"] = None
            continue
        a0 = up_index(t_of(r["voice_on"]) - 0.05e9)
        a1 = up_index(t_of(r["voice_off"]) + 0.45e9)
        nxt = next((q for q in requests[i + 1:] if q["said"]), None)
        if nxt:
            a1 = min(a1, up_index(t_of(nxt["voice_on"])))
        hyp = recs["user"].recognize(up[a0:a1]) if a1 > a0 else []
        r["up_hyp"] = " ".join(hyp)
        r["up_window_s"] = round((a1 - a0) / RATE, 3)
        up_pairs.append((ref, hyp))
    up_wer, up_err, up_n = speech.wer(up_pairs)

    # downlink: one speaker segment per reply the stand-in started sending
    replies = [r for r in st.get("replies", []) if r.get("audio_start_ns")]
    segs = []
    for j, r in enumerate(replies):
        a = max(0, idx(r["audio_start_ns"]))
        bound = len(spk)
        if j + 1 < len(replies):
            bound = min(bound, idx(replies[j + 1]["audio_start_ns"]) + int(0.04 * RATE))
        win = spk[a:min(bound, a + int(1.5 * RATE))]
        loud = np.flatnonzero(np.abs(win) > LOUD)
        if not len(loud):
            segs.append({"reply": r, "onset": None})
            continue
        onset = a + int(loud[0])
        rest = np.flatnonzero(np.abs(spk[onset:bound]) > LOUD)
        last = onset + int(rest[-1])
        segs.append({"reply": r, "onset": onset, "last": last})
    down_pairs = []
    downlink = []
    for sgm in segs:
        r = sgm["reply"]
        k = r["index"] + 1 if r["kind"] == "reply" else 0
        if k >= len(meta["assistant"]):
            continue
        a_meta = meta["assistant"][k]
        total_loud = (a_meta["last_loud"] - a_meta["first_loud"]) / RATE
        if sgm["onset"] is None:
            downlink.append({"reply": k, "played_s": 0.0, "of_s": round(total_loud, 3), "ref": "", "hyp": ""})
            continue
        played = (sgm["last"] - sgm["onset"]) / RATE
        at = a_meta["first_loud"] / RATE + played  # in the reply WAV's time
        ends_ = a_meta["word_ends"]
        words = a_meta["text"].split()
        ref = []
        for w_i, w in enumerate(words):
            begin = ends_[w_i - 1] if w_i else a_meta["first_loud"] / RATE
            if (begin + ends_[w_i]) / 2 <= at + 0.02:
                ref.append(w)
        a0 = max(0, sgm["onset"] - int(0.1 * RATE))
        a1 = min(len(spk), sgm["last"] + int(0.15 * RATE))
        hyp = recs["assistant"].recognize(spk[a0:a1])
        down_pairs.append((ref, hyp))
        downlink.append({"reply": k, "item_id": r["item_id"], "played_s": round(played, 3), "of_s": round(total_loud, 3),
                         "cut": played < total_loud - 0.1, "end_reason": r.get("end_reason"),
                         "ref": " ".join(ref), "hyp": " ".join(hyp), "onset": sgm["onset"], "last": sgm["last"]})
    down_wer, down_err, down_n = speech.wer(down_pairs) if down_pairs else (float("nan"), 0, 0)
    # how much of the replies was heard at all: WER on two words of each says little
    words_total = sum(len(meta["assistant"][d["reply"]]["text"].split()) for d in downlink)
    words_played = sum(len(d["ref"].split()) for d in downlink)

    # barge-ins: a request whose voice starts while a reply is audible
    barge = []
    for r in requests:
        if not r["said"]:
            continue
        v = r["voice_on"]
        for d in downlink:
            if d.get("onset") is not None and d["onset"] <= v <= d["last"]:
                barge.append({"k": r["k"], "reply": d["reply"], "speaker_silent_ms": round((d["last"] - v) / RATE * 1000, 1),
                              "reply_cut": d["cut"], "played_s": d["played_s"], "of_s": d["of_s"]})
                break

    # truncations: what Linnet said was played against what the speaker played
    played_ms = {d.get("item_id"): d["played_s"] * 1000 for d in downlink if d.get("item_id")}
    truncs = []
    for t in st.get("truncations", []):
        truncs.append({"item_id": t["item_id"], "audio_end_ms": t["audio_end_ms"], "accepted": t["accepted"],
                       "speaker_played_ms": round(played_ms[t["item_id"]], 1) if t["item_id"] in played_ms else None,
                       "standin_sent_ms": t["sent_ms"]})

    # what the room did
    def act_db(x):
        return speech.active_rms_dbfs(x)
    # the end of each request → the next reply audible on the speaker (what a sessions
    # on demand's backlog may add to: the turn is committed once the backlog is out)
    ons = sorted(e["t_ns"] for e in ev if e.get("ev") == "speaker_on")
    reply_after = []
    for e in ev:
        if e.get("ev") == "talk_end":
            nxt = [t for t in ons if t > e["t_ns"]]
            if nxt:
                reply_after.append(round((nxt[0] - e["t_ns"]) / 1e6))
    stats = {
        "reply_after_talk_end_ms": reply_after,
        "connected": any(s.get("state") == "connected" for sess_ in sessions for s in sess_.get("states", [])),
        "sessions": len(sessions),
        "rtp_packets_received": sum(sess_.get("rtp_packets_received", 0) for sess_ in sessions),
        "rtp_packets_sent": sum(sess_.get("rtp_packets_sent", 0) for sess_ in sessions),
        "late_packets": sum(((sess_.get("standin") or {}).get("uplink_decoder") or {}).get("late_packets", 0)
                            for sess_ in sessions),
        "concealed_packets": sum(((sess_.get("standin") or {}).get("uplink_decoder") or {}).get("concealed_packets", 0)
                                 for sess_ in sessions),
        "replies_started": len(replies),
        "requests_said": sum(1 for r in requests if r["said"]),
        "underruns": sum(1 for e in ev if e.get("ev") == "underrun"),
        "drops": sum(1 for e in ev if e.get("ev") == "drop"),
        "overruns": sum(1 for e in ev if e.get("ev") == "overrun"),
        "echo_vs_talker_db": round(act_db(echo) - act_db(talk), 1) if act_db(echo) > -200 else None,
        "vad_interruptions": len(st.get("interruptions", [])),
        "client_events": sorted({e["type"] for e in st.get("client_events", []) if e.get("type")}),
        "sim_load_percent": next((e.get("sim_load_percent") for e in ev if e.get("ev") == "room_close"), None),
        "worker_cpu_percent": next((round(e["worker_cpu_ms"] / 10 / e["simulated_seconds"], 3) for e in ev
                                    if e.get("ev") == "room_close" and e.get("worker_cpu_ms") is not None
                                    and e.get("simulated_seconds")), None),
    }
    return {"up_wer": up_wer, "up_errors": up_err, "up_words": up_n, "down_wer": down_wer,
            "down_errors": down_err, "down_words": down_n, "reply_words_played": words_played,
            "reply_words_total": words_total, "requests": requests, "downlink": downlink,
            "barge_ins": barge, "truncations": truncs, "stats": stats,
            "streams": [{k: v for k, v in s_.items() if k != "rows"} for s_ in streams],
            "on_demand": [e for e in read_events(os.path.join(cell_dir, "linnet-events.jsonl"))
                          if e.get("type") == "on_demand"]}


def uplink_streams(arrivals: np.ndarray) -> list:
    """The stand-in's recording cut into its RTP streams (one SSRC each: a session), and
    what each one's timing shows. Rows: [recording index, samples, arrival ns, seq, ts,
    SSRC]. A stream's anchor is min(arrival − its media position): when its first
    sample would have arrived had every frame come as live audio does, the capture time
    plus the path's delay. The first frames' lag behind that line is the backlog a
    session on demand sends; while it is being sent the media runs ahead of the wall
    clock (catch_up_rate: media seconds per second, until the lag is under 20 ms). Also
    whether sequence numbers and timestamps ran on without a gap or a jump (RFC 3550
    §5.1: ts advances by the samples each packet carries, 960 at 48 kHz and 20 ms)."""
    out = []
    rows = [r for r in arrivals.tolist() if len(r) >= 6 and r[5] != -1]
    k = 0
    while k < len(rows):
        j = k
        while j < len(rows) and rows[j][5] == rows[k][5]:
            j += 1
        seg = rows[k:j]
        first = seg[0][0]
        end = seg[-1][0] + seg[-1][1]
        pos_ns = [(r[0] - first) * 1e9 / RATE for r in seg]
        anchor = min(r[2] - p for r, p in zip(seg, pos_ns))
        lag_ms = [(r[2] - anchor - p) / 1e6 for r, p in zip(seg, pos_ns)]
        caught = next((i for i, g in enumerate(lag_ms) if g < 20), 0)
        wall = (seg[caught][2] - seg[0][2]) / 1e9
        media = (seg[caught][0] - first) / RATE
        packets = []  # (seq, ts) once each
        for r in seg:
            if not packets or packets[-1] != (r[3], r[4]):
                packets.append((r[3], r[4]))
        seq_gaps = sum(1 for a_, b_ in zip(packets, packets[1:]) if (b_[0] - a_[0]) % 65536 != 1)
        ts_jumps = sum(1 for a_, b_ in zip(packets, packets[1:])
                       if (b_[0] - a_[0]) % 65536 == 1 and (b_[1] - a_[1]) % (1 << 32) != 960)
        out.append({"ssrc": seg[0][5], "first": first, "end": end, "anchor_ns": anchor,
                    "first_arrival_ns": seg[0][2], "seconds": round((end - first) / RATE, 3),
                    "backlog_ms": round(lag_ms[0], 1), "catch_up_s": round(wall, 3),
                    "catch_up_rate": round(media / wall, 2) if wall > 0 else None,
                    "packets": len(packets), "seq_gaps": seq_gaps, "ts_jumps": ts_jumps})
        k = j
    return out


def baseline(meta: dict, recs: dict) -> dict:
    up = [(speech.USER[k].split(), recs["user"].recognize(wav(u["wav"]))) for k, u in enumerate(meta["user"])]
    down = [(a["text"].split(), recs["assistant"].recognize(wav(a["wav"]))) for a in meta["assistant"]]
    return {"up_wer": speech.wer(up)[0], "down_wer": speech.wer(down)[0]}


# -- main ------------------------------------------------------------------------------------------

def fmt(x: float) -> str:
    return "nan" if x != x else f"{x:.3f}"


def main(argv=None) -> int:
    # SIGTERM ends the run through the finally blocks (children stopped, not orphaned)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--linnet", default=os.path.join(ROOT, ".build/debug/linnet"))
    ap.add_argument("--variants", default="default")
    ap.add_argument("--rooms", default="noecho,handset,speaker")
    ap.add_argument("--losses", default="0,10")
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(ROOT, "build/duplex-wer"))
    ap.add_argument("--plugin", help="the room plugin .so (default: build it with Tests/Room/build.sh)")
    ap.add_argument("--interop-python", help="the interop venv's python (default: Tests/Interop/setup.sh)")
    ap.add_argument("--call-limit", type=int, default=200, help="seconds a call may last at most")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ci", action="store_true", help="one short cell with sanity assertions")
    ap.add_argument("--ci-on-demand", action="store_true",
                    help="sessions on demand: two push-to-talk requests, each starting its own session")
    a = ap.parse_args(argv)
    if a.ci:
        # The live echo path (a handset's weak echo) and a barge-in with its truncate.
        a.variants, a.rooms, a.losses, a.requests, a.call_limit = "default", "handset", "0", 3, 90
    if a.ci_on_demand:
        a.variants, a.rooms, a.losses, a.requests, a.call_limit = "on-demand", "noecho", "0", 2, 90
    if not os.access(a.linnet, os.X_OK):
        log(f"error: no linnet binary at {a.linnet}")
        return 69
    a.linnet = os.path.abspath(a.linnet)
    # The stand-in and the room run in directories of their own: every path they are
    # given must not depend on ours.
    a.out = os.path.abspath(a.out)
    if not a.plugin:
        a.plugin = subprocess.run([os.path.join(ROOT, "Tests/Room/build.sh")], check=True, text=True,
                                  stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]
    if not a.interop_python:
        a.interop_python = subprocess.run([os.path.join(ROOT, "Tests/Interop/setup.sh")], check=True, text=True,
                                          stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]
    os.makedirs(a.out, exist_ok=True)
    meta = assets(os.path.join(a.out, "assets"))
    recs = {"user": speech.Recognizer("user", os.path.join(a.out, "asr-user")),
            "assistant": speech.Recognizer("assistant", os.path.join(a.out, "asr-assistant"))}
    t_all = time.monotonic()
    base = baseline(meta, recs)
    results = {"baseline": base, "cells": [], "linnet": a.linnet}
    print(f"BENCH duplex_wer_clean_up {fmt(base['up_wer'])} wer", flush=True)
    print(f"BENCH duplex_wer_clean_down {fmt(base['down_wer'])} wer", flush=True)
    for variant in a.variants.split(","):
        for room_name in a.rooms.split(","):
            for loss in [float(x) for x in a.losses.split(",")]:
                name = f"{variant}_{room_name}_{loss:g}"
                cell_dir = os.path.join(a.out, name)
                shutil.rmtree(cell_dir, ignore_errors=True)
                log(f"duplex: {name}: calling ({ROOMS[room_name]['what']}, {loss:g} % loss, flags {VARIANTS[variant]})")
                call = run_call(cell_dir, a, meta, ROOMS[room_name], loss, VARIANTS[variant], a.requests, a.seed,
                                ptt=variant in PTT_VARIANTS, standin_extra=STANDIN_VARIANTS.get(variant))
                j = judge(cell_dir, meta, a.requests, recs)
                cell = {"variant": variant, "room": room_name, "loss": loss, "call": call, **j}
                results["cells"].append(cell)
                suffix = "" if variant == "default" else f"_{variant.replace('-', '_')}"
                print(f"BENCH duplex_wer_{room_name}_{loss:g}_up{suffix} {fmt(j['up_wer'])} wer", flush=True)
                print(f"BENCH duplex_wer_{room_name}_{loss:g}_down{suffix} {fmt(j['down_wer'])} wer", flush=True)
                if variant == "on-demand":
                    waits = [e["first_packet_ms"] for e in j["on_demand"] if "first_packet_ms" in e]
                    rates = [x["catch_up_rate"] for x in j["streams"] if x["catch_up_rate"]]
                    if waits:
                        print(f"BENCH on_demand_press_to_first_packet_ms_{room_name}_{loss:g} {np.median(waits):.0f} ms", flush=True)
                    if rates:
                        print(f"BENCH on_demand_catch_up_rate_{room_name}_{loss:g} {np.median(rates):.2f} x", flush=True)
                with open(os.path.join(a.out, "results.json"), "w") as f:
                    json.dump(results, f, indent=1, default=str)
    results["seconds"] = round(time.monotonic() - t_all, 1)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    print_tables(results)
    if a.ci:
        return ci_verdict(results)
    if a.ci_on_demand:
        return ci_on_demand_verdict(results)
    return 0


def print_tables(results: dict) -> None:
    b = results["baseline"]
    print(f"\nclean baseline (recogniser on the source WAVs): uplink WER {fmt(b['up_wer'])}, downlink WER {fmt(b['down_wer'])}")
    print(f"\n{'variant':9s} {'room':8s} {'loss':>4s} {'up WER':>7s} {'down WER':>8s} {'heard':>7s} {'said':>4s} {'replies':>7s} "
          f"{'barge':>5s} {'silent ms (median)':>18s} {'cut':>3s} {'trunc':>5s} {'echo/talk dB':>12s} {'underruns':>9s} {'room CPU %':>10s}")
    for c in results["cells"]:
        s = c["stats"]
        silent = [b["speaker_silent_ms"] for b in c["barge_ins"]]
        med = f"{np.median(silent):.0f}" if silent else "-"
        cut = sum(1 for b in c["barge_ins"] if b["reply_cut"])
        etd = "-" if s["echo_vs_talker_db"] is None else f"{s['echo_vs_talker_db']:+.1f}"
        cpu = "-" if s.get("sim_load_percent") is None else f"{s['sim_load_percent'] + (s.get('worker_cpu_percent') or 0):.2f}"
        heard = f"{c['reply_words_played']}/{c['reply_words_total']}"
        print(f"{c['variant']:9s} {c['room']:8s} {c['loss']:4g} {fmt(c['up_wer']):>7s} {fmt(c['down_wer']):>8s} {heard:>7s} "
              f"{s['requests_said']:4d} {s['replies_started']:7d} {len(c['barge_ins']):5d} {med:>18s} {cut:3d} "
              f"{len(c['truncations']):5d} {etd:>12s} {s['underruns']:9d} {cpu:>10s}")
    print("\nbarge-ins (user's voice at the microphone → speaker silent, ms):")
    for c in results["cells"]:
        parts = [f"req{b['k']}→reply{b['reply']}: {b['speaker_silent_ms']:.0f}{' cut' if b['reply_cut'] else ''}"
                 for b in c["barge_ins"]]
        print(f"  {c['variant']}/{c['room']}/{c['loss']:g}: " + ("; ".join(parts) if parts else "none"))
    print("\ntruncate check (audio_end_ms Linnet sent | speaker played ms | stand-in sent ms):")
    for c in results["cells"]:
        parts = [f"{t['audio_end_ms']} | {t['speaker_played_ms']} | {t['standin_sent_ms']}{'' if t['accepted'] else ' (refused)'}"
                 for t in c["truncations"]]
        n_barge = len(c["barge_ins"])
        print(f"  {c['variant']}/{c['room']}/{c['loss']:g}: " + ("; ".join(parts) if parts else
              f"no conversation.item.truncate sent ({n_barge} barge-ins)"))
    streams = [c for c in results["cells"] if c["variant"] in PTT_VARIANTS]
    if streams:
        print("\nuplink streams, one per session (backlog: the first frame's lag behind live; catch-up: "
              "media s per s while it is sent; press → first packet: Linnet's own figure):")
        for c in streams:
            waits = [e["first_packet_ms"] for e in c["on_demand"] if "first_packet_ms" in e]
            parts = [f"{x['seconds']:.1f} s, backlog {x['backlog_ms']:.0f} ms"
                     + (f", caught up in {x['catch_up_s']:.2f} s at {x['catch_up_rate']}x" if x["catch_up_rate"] else "")
                     + f", seq gaps {x['seq_gaps']}, ts jumps {x['ts_jumps']}" for x in c["streams"]]
            after = c["stats"]["reply_after_talk_end_ms"]
            med = f"{np.median(after):.0f}" if after else "-"
            print(f"  {c['variant']}/{c['room']}/{c['loss']:g}: {len(c['streams'])} streams, late packets "
                  f"{c['stats']['late_packets']}, press → first packet {waits} ms, request's end → reply audible "
                  f"median {med} ms (max {max(after) if after else '-'})")
            for part in parts:
                print(f"    {part}")
    print(f"\nwall time of the whole run: {results.get('seconds', 0):.0f} s")


def ci_verdict(results: dict) -> int:
    c = results["cells"][0]
    s = c["stats"]
    checks = {
        "connected": s["connected"],
        "audio up (RTP received by the stand-in)": s["rtp_packets_received"] > 100,
        "audio down (replies played on the speaker)": sum(1 for d in c["downlink"] if d["played_s"] > 0.5) >= 2,
        "every request said": s["requests_said"] == len(c["requests"]),
        "uplink mostly understood (WER <= 0.5)": c["up_wer"] <= 0.5,
        "downlink mostly understood (WER <= 0.5)": c["down_wer"] <= 0.5,
        # The second request starts about a second before the first reply ends: the reply
        # is cut (by Linnet's voice flag or the stand-in's VAD), and Linnet tells the
        # provider how much it heard, within what the provider sent (the stand-in
        # refuses more, as the service does).
        "a barge-in cut the reply": any(b["reply_cut"] for b in c["barge_ins"]),
        "conversation.item.truncate sent": len(c["truncations"]) >= 1,
        "every truncate accepted (audio_end_ms within the audio sent)":
            all(t["accepted"] for t in c["truncations"]),
    }
    for k, v in checks.items():
        print(f"ci: {'ok  ' if v else 'FAIL'} {k}")
    ok = all(checks.values())
    print(f"ci: {'passed' if ok else 'failed'}")
    return 0 if ok else 1


def ci_on_demand_verdict(results: dict) -> int:
    c = results["cells"][0]
    s = c["stats"]
    streams = c["streams"]
    waits = [e["first_packet_ms"] for e in c["on_demand"] if "first_packet_ms" in e]
    n = len(c["requests"])
    checks = {
        "every request said": s["requests_said"] == n,
        # idle-seconds closed each session in the pause, so each press found none
        f"a session per request ({n})": s["sessions"] == n and len(streams) == n and len(waits) == n,
        # each press's audio waited for its session, and went in a burst that caught up
        "each session began with a backlog (its first frame later than live)":
            all(x["backlog_ms"] >= 30 for x in streams),
        "each backlog caught up at about twice real time (1.6-2.4x)":
            all(x["catch_up_rate"] is not None and 1.6 <= x["catch_up_rate"] <= 2.4 for x in streams),
        "RTP sequence and timestamps without a gap or a jump (RFC 3550 5.1)":
            all(x["seq_gaps"] == 0 and x["ts_jumps"] == 0 for x in streams),
        "no packet late for the stand-in's decoder": s["late_packets"] == 0,
        # the words spoken before each session existed reached the provider
        "uplink understood (WER <= 0.2)": c["up_wer"] <= 0.2,
        "every request answered": sum(1 for d in c["downlink"] if d["played_s"] > 0.5) >= n,
    }
    for k, v in checks.items():
        print(f"ci: {'ok  ' if v else 'FAIL'} {k}")
    ok = all(checks.values())
    print(f"ci: {'passed' if ok else 'failed'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
