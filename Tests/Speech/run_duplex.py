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
            "barge100": ["--barge-in-ms", "100"], "barge140": ["--barge-in-ms", "140"]}


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


def run_call(cell_dir: str, a, meta: dict, room: dict, loss: float, flags: list, n: int, seed: int) -> dict:
    os.makedirs(cell_dir, exist_ok=True)
    logdir = os.path.join(cell_dir, "room")
    shutil.rmtree(logdir, ignore_errors=True)
    script = os.path.join(cell_dir, "talker.txt")
    with open(script, "w") as f:
        f.write(talker_script(meta, n, a.ci))
    room_info = asoundrc(os.path.join(cell_dir, ".asoundrc"), a.plugin, room, script, logdir, seed)
    started = time.monotonic()
    relay_cmds = [f"loss {loss / 100:g}"] if loss else []
    procs = start_call(cell_dir, a, ["--replies", meta["replies_json"]], flags, relay_cmds, seed, a.call_limit)
    linnet = procs["linnet"]
    try:
        # Wait for the talker's last request to end and the reply after it to finish
        # (speaker quiet), or for a generous limit; polling the room's log file.
        events_path = os.path.join(logdir, "events.jsonl")
        last_end_ns = None
        reason = "limit"
        while time.monotonic() - started < a.call_limit + 30:
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
            time.sleep(0.2)  # polling a log file another process writes
        log(f"duplex: {os.path.basename(cell_dir)}: ending the call ({reason}, {time.monotonic() - started:.0f} s)")
    finally:
        rc = stop_call(procs)
    return {"linnet_exit": rc, "end_reason": reason, "seconds": round(time.monotonic() - started, 1),
            **room_info}


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
    sess = sessions[-1] if sessions else {}
    st = sess.get("standin", {})
    up = wav(os.path.join(cell_dir, "uplink.wav")) if os.path.exists(os.path.join(cell_dir, "uplink.wav")) else np.zeros(0, np.int16)
    arrivals = np.array(rep.get("standin", {}).get("arrivals") or [[0, 0, 0]], dtype=np.int64)

    def idx(t_ns: float) -> int:
        return int(round((t_ns - t0) * RATE / 1e9))

    def t_of(i: float) -> float:
        return t0 + i * 1e9 / RATE

    def up_index(t_ns: float) -> int:
        """The stand-in's recording index of the first frame that arrived at/after t."""
        k = int(np.searchsorted(arrivals[:, 2], t_ns))
        if k >= len(arrivals):
            return len(up)
        return int(arrivals[k, 0])

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
    stats = {
        "connected": any(s.get("state") == "connected" for s in sess.get("states", [])),
        "rtp_packets_received": sess.get("rtp_packets_received", 0),
        "rtp_packets_sent": sess.get("rtp_packets_sent", 0),
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
            "barge_ins": barge, "truncations": truncs, "stats": stats}


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
    a = ap.parse_args(argv)
    if a.ci:
        # The live echo path (a handset's weak echo) and a barge-in with its truncate.
        a.variants, a.rooms, a.losses, a.requests, a.call_limit = "default", "handset", "0", 3, 90
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
                call = run_call(cell_dir, a, meta, ROOMS[room_name], loss, VARIANTS[variant], a.requests, a.seed)
                j = judge(cell_dir, meta, a.requests, recs)
                cell = {"variant": variant, "room": room_name, "loss": loss, "call": call, **j}
                results["cells"].append(cell)
                suffix = "" if variant == "default" else f"_{variant.replace('-', '_')}"
                print(f"BENCH duplex_wer_{room_name}_{loss:g}_up{suffix} {fmt(j['up_wer'])} wer", flush=True)
                print(f"BENCH duplex_wer_{room_name}_{loss:g}_down{suffix} {fmt(j['down_wer'])} wer", flush=True)
                with open(os.path.join(a.out, "results.json"), "w") as f:
                    json.dump(results, f, indent=1, default=str)
    results["seconds"] = round(time.monotonic() - t_all, 1)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    print_tables(results)
    if a.ci:
        return ci_verdict(results)
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


if __name__ == "__main__":
    sys.exit(main())
