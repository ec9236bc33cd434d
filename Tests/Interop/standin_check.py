#!/usr/bin/env python3
"""Checks realtime_standin.py's Realtime logic without a network: the server VAD, a
reply's events and audio, interrupt_response, output_audio_buffer.clear and
conversation.item.truncate (accepted, beyond the audio sent, unknown item), driven
through StandinScript with a stand-in session and channel. The current Linnet sends
no truncate, so the whole-call runs never exercise that path: this does.

    python standin_check.py        # exit 0 when every check holds, 1 otherwise
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402
import realtime_standin as rs  # noqa: E402

FRAME = rs.FRAME


class Channel:
    label = "oai-events"
    readyState = "open"


class Session:
    def __init__(self, standin: dict) -> None:
        self.args = peer.parse_args(["--listen", "127.0.0.1:0", "--mode", "openai"])
        self.id = "check"
        self.server = type("S", (), {"standin": standin})()
        self.speaking = False
        self.input_samples_since_clear = 0
        self.sent: list = []
        self.tasks: list = []

    def t(self) -> float:
        return 0.0

    def send(self, channel, message) -> None:
        self.sent.append(json.loads(message))

    def spawn(self, coro):
        task = asyncio.ensure_future(coro)
        self.tasks.append(task)
        return task


def tone(ms: int, dbfs: float) -> list:
    n = 48 * ms
    x = np.sin(2 * np.pi * 300 * np.arange(n) / 48000) * 32768 * 10 ** (dbfs / 20) * 1.414
    x = np.round(x).astype(np.int16)
    return [x[i:i + FRAME] for i in range(0, n, FRAME)]


async def run() -> list:
    reply = np.full(48000 * 2, 1000, dtype=np.int16)  # a 2 s "reply"
    standin = {"greeting": None, "replies": [{"wav": "r0.wav", "text": "one two three", "samples": reply},
                                             {"wav": "r1.wav", "text": "four five", "samples": reply}],
               "vad_dbfs": -45.0, "vad_onset_frames": 3}
    session = Session(standin)
    script = rs.StandinScript(session, Channel())
    session.openai = script
    script.start()
    failures = []

    def types() -> list:
        return [e["type"] for e in session.sent]

    def expect(cond: bool, what: str) -> None:
        if not cond:
            failures.append(what)
        print(("ok   " if cond else "FAIL ") + what)

    # a user turn: 1 s of speech, then 600 ms of silence
    for f in tone(1000, -20):
        script.on_audio(f)
    expect("input_audio_buffer.speech_started" in types(), "speech_started on speech")
    for f in tone(600, -90):
        script.on_audio(f)
    expect("input_audio_buffer.speech_stopped" in types() and "input_audio_buffer.committed" in types(),
           "speech_stopped and committed after 500 ms of silence")
    expect("response.created" in types() and "response.output_item.added" in types(), "a response for the turn")
    item = next(e["item"]["id"] for e in session.sent if e["type"] == "response.output_item.added")
    # the voice: 500 ms of it
    for _ in range(25):
        script.next_samples(FRAME)
    expect("output_audio_buffer.started" in types(), "output_audio_buffer.started with the first frame")
    await asyncio.sleep(0.4)  # let the transcript task stream its words (0.3 s)
    deltas = [e for e in session.sent if e["type"] == "response.output_audio_transcript.delta"]
    expect(len(deltas) == 3 and all(d["item_id"] == item for d in deltas), "transcript deltas carry the item id")
    # truncation
    n = len(session.sent)
    script.handle(json.dumps({"type": "conversation.item.truncate", "item_id": item, "content_index": 0, "audio_end_ms": 400}))
    expect(session.sent[n:] and session.sent[n]["type"] == "conversation.item.truncated"
           and session.sent[n]["audio_end_ms"] == 400, "truncate within the audio sent: truncated")
    n = len(session.sent)
    script.handle(json.dumps({"type": "conversation.item.truncate", "item_id": item, "content_index": 0, "audio_end_ms": 900}))
    expect(session.sent[n:] and session.sent[n]["type"] == "error", "truncate beyond the 500 ms sent: error")
    n = len(session.sent)
    script.handle(json.dumps({"type": "conversation.item.truncate", "item_id": "item_nope", "content_index": 0, "audio_end_ms": 10}))
    expect(session.sent[n:] and session.sent[n]["type"] == "error", "truncate of an unknown item: error")
    log = script.truncations
    expect(len(log) == 3 and log[0]["sent_ms"] == 500.0 and log[0]["accepted"] and not log[1]["accepted"],
           "the log says how much of the item had been sent (500 ms)")
    # barge-in: speech while the reply plays interrupts it
    n = len(session.sent)
    for f in tone(200, -20):
        script.on_audio(f)
    after = [e["type"] for e in session.sent[n:]]
    expect("input_audio_buffer.speech_started" in after and "output_audio_buffer.cleared" in after,
           "speech over the reply: speech_started, output_audio_buffer.cleared")
    expect(script.playing is None and script.interruptions and script.interruptions[0]["sent_ms"] == 500.0,
           "the interrupted reply stopped after 500 ms sent")
    silent = script.next_samples(FRAME)
    expect(not silent.any(), "no voice after the interruption")
    for f in tone(600, -90):
        script.on_audio(f)
    expect(script.playing is not None and script.playing.index == 1, "the next turn gets the next reply")
    script.next_samples(FRAME)
    n = len(session.sent)
    script.handle(json.dumps({"type": "output_audio_buffer.clear"}))
    expect([e["type"] for e in session.sent[n:]] == ["output_audio_buffer.cleared"] and script.playing is None,
           "output_audio_buffer.clear stops the voice")
    for t in session.tasks:
        t.cancel()
    return failures


def main() -> int:
    failures = asyncio.run(run())
    print("standin_check: " + ("passed" if not failures else f"{len(failures)} failed"))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
