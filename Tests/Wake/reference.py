#!/usr/bin/env python3
"""The independent judge of Linnet's wake word: pymicro-wakeword 2.5.0 itself.

    reference.py clips OUT_DIR [--set ci|full]
        Synthesizes the recordings (espeak-ng): each model's phrase in several voices,
        speeds and levels, in noise and in a simulated room's echo, inside longer
        sentences, near-misses ("okay now", "hey travis") and plain speech with no
        wake word. Writes OUT_DIR/NAME.raw (s16le, 16 kHz, mono) and OUT_DIR/clips.txt
        (one NAME and the phrase it holds per line).

    reference.py long OUT.raw SECONDS
        Speech with no wake word in it (false wakes per hour, bench/wake.sh).

    reference.py events MODEL.json RAW...
        How many wakes pymicro-wakeword makes on each RAW (a line each), counted as
        Linnet's listener counts them (one per 1.5 s).

    reference.py room OUT_DIR
        The assistant's replies saying the wake word through a simulated room, with and
        without the user saying it over them (self-wakes, bench/wake.sh).

    reference.py to16k IN.wav OUT.raw
        A WAV to raw s16le 16 kHz.

    reference.py hands-free OUT.wav
        A hands-free turn for the end-to-end test: the wake word, then a request the
        speech judge knows ("turn on the kitchen light"), 48 kHz.

    reference.py judge MODEL.json RAW...
        Runs each recording through pymicro-wakeword's own pipeline, the way its
        MicroWakeWord.process_streaming is meant to be driven: MicroWakeWordFeatures
        (pymicro-features, TFLite Micro's audio frontend) in 10 ms steps, and the model
        on its bundled TensorFlow Lite C runtime, every 3 feature frames. Prints one
        JSON line per recording: {"file", "outputs": the model's uint8 output at each
        inference, "fired": the inferences at which process_streaming said True (the
        sliding window's mean over the cutoff)}.

Needs the speech venv (Tests/Speech/requirements.txt: pymicro-wakeword, pymicro-features,
numpy) and espeak-ng for `clips`.
"""
import json
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np

RATE = 16000


def espeak(text: str, voice: str, speed: int) -> np.ndarray:
    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "--stdout", text],
                         check=True, capture_output=True).stdout
    import io
    with wave.open(io.BytesIO(wav)) as w:
        rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64)
    # To 16 kHz through the spectrum (exact band limit; the clips are short).
    n = int(round(len(x) * RATE / rate))
    return np.fft.irfft(np.fft.rfft(x), n) * (n / len(x))


def level(x: np.ndarray, dbfs: float) -> np.ndarray:
    rms = np.sqrt(np.mean(x ** 2)) or 1.0
    return x * (32768 * 10 ** (dbfs / 20) / rms)


def room(x: np.ndarray, rt60: float, rng: np.random.Generator) -> np.ndarray:
    # An exponentially decaying noise tail (a diffuse room) after the direct sound.
    n = int(rt60 * RATE)
    t = np.arange(n) / RATE
    h = rng.standard_normal(n) * np.exp(-6.9 * t / rt60) * 0.25
    h[0] = 1.0
    return np.convolve(x, h)[: len(x) + n]


def pad(x: np.ndarray, before: float = 0.6, after: float = 0.8) -> np.ndarray:
    return np.concatenate([np.zeros(int(before * RATE)), x, np.zeros(int(after * RATE))])


def write(out: Path, name: str, x: np.ndarray) -> None:
    (out / f"{name}.raw").write_bytes(np.clip(np.round(x), -32768, 32767).astype("<i2").tobytes())


PHRASES = {"okay_nabu": "okay nabu", "hey_jarvis": "hey jarvis", "alexa": "alexa", "hey_mycroft": "hey mycroft"}
NEAR = ["okay now", "okay nah boo", "hey travis", "hey jarvik", "alexis", "a lexus", "hey microsoft", "hey my crofter"]
SENTENCES = [
    "the weather today is cloudy with a chance of rain in the afternoon",
    "please remember to buy milk eggs and bread on the way home",
    "the meeting has been moved to thursday at three o clock",
    "turn left at the next corner and the station is on your right",
]


def clips(out: Path, full: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(40)
    voices = ["en-us", "en-us+f3", "en-gb", "en-us+m7"] + (["en-us+f5", "en+klatt2"] if full else [])
    speeds = [140, 175] + ([210] if full else [])
    listing = []

    def add(name: str, phrase: str, x: np.ndarray) -> None:
        write(out, name, x)
        listing.append(f"{name}\t{phrase}")

    for key, phrase in PHRASES.items():
        for v in voices:
            for s in speeds:
                add(f"{key}_{v.replace('+', '-')}_{s}", phrase, pad(level(espeak(phrase, v, s), -26)))
        base = espeak(phrase, "en-us", 160)
        add(f"{key}_quiet", phrase, pad(level(base, -42)))
        add(f"{key}_loud", phrase, pad(level(base, -10)))
        noisy = pad(level(base, -26))
        add(f"{key}_noise10db", phrase, noisy + level(rng.standard_normal(len(noisy)), -36))
        add(f"{key}_room", phrase, pad(level(room(base, 0.5, rng), -26)))
        # The phrase inside a sentence, then a question after it.
        add(f"{key}_sentence", phrase,
            pad(level(espeak(f"and then I said {phrase} what time is it", "en-us", 160), -26)))
    for i, near in enumerate(NEAR):
        add(f"near_{i}", "", pad(level(espeak(near, voices[i % len(voices)], 160), -26)))
    for i, sentence in enumerate(SENTENCES * (3 if full else 1)):
        add(f"speech_{i}", "", pad(level(espeak(sentence, voices[i % len(voices)], speeds[i % len(speeds)]), -26)))
    add("silence", "", np.zeros(3 * RATE))
    add("noise", "", level(rng.standard_normal(4 * RATE), -40))
    (out / "clips.txt").write_text("\n".join(listing) + "\n")


def judge(model_json: str, raws: list) -> None:
    from pymicro_wakeword import MicroWakeWord
    from pymicro_wakeword.microwakeword import MicroWakeWordFeatures

    for raw in raws:
        ww = MicroWakeWord.from_config(model_json)
        features = MicroWakeWordFeatures()
        outputs, fired = [], []
        for f in features.process_streaming(Path(raw).read_bytes()):
            hit = ww.process_streaming(f)
            if not ww._features:  # this frame made an inference (the stride was full)
                # The dequantized output (q - zero point) * scale, back to the uint8 q.
                q = round(ww._probabilities[-1] / ww.output_scale + ww.output_zero_point)
                outputs.append(q)
                if hit:
                    fired.append(len(outputs) - 1)
        ww.close()
        print(json.dumps({"file": Path(raw).name, "outputs": outputs, "fired": fired}))


def long_speech(out: str, seconds: float) -> None:
    """Speech that never says a wake word, for false wakes per hour: the speech judge's
    requests, replies and their distractors, this file's sentences and near-misses, in
    six voices at three speeds, with pauses of 0.2-2 s, at -20 to -32 dBFS."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "Speech"))
    import speech
    texts = speech.USER + speech.USER_DISTRACTORS + speech.ASSISTANT + speech.ASSISTANT_DISTRACTORS + SENTENCES + NEAR
    voices = ["en-us", "en-us+f3", "en-gb", "en-us+m7", "en-us+f5", "en+klatt2"]
    rng = np.random.default_rng(7)
    cache = {}
    parts, total = [], 0
    while total < seconds * RATE:
        key = (int(rng.integers(len(texts))), int(rng.integers(len(voices))), int(rng.choice([130, 160, 190])))
        if key not in cache:
            cache[key] = espeak(texts[key[0]], voices[key[1]], key[2])
        x = level(cache[key], float(rng.uniform(-32, -20)))
        gap = np.zeros(int(rng.uniform(0.2, 2.0) * RATE))
        parts += [x, gap]
        total += len(x) + len(gap)
    write(Path(out).parent, Path(out).stem, np.concatenate(parts)[: int(seconds * RATE)])


def events(model_json: str, raw: str) -> int:
    """Wakes as Linnet's listener counts them: a detection, then 150 feature frames
    (1.5 s) whose detections are the same wake."""
    from pymicro_wakeword import MicroWakeWord
    from pymicro_wakeword.microwakeword import MicroWakeWordFeatures
    ww = MicroWakeWord.from_config(model_json)
    wakes, quiet = 0, 0
    for f in MicroWakeWordFeatures().process_streaming(Path(raw).read_bytes()):
        hit = ww.process_streaming(f)
        if quiet > 0:
            quiet -= 1
        elif hit:
            wakes, quiet = wakes + 1, 150
    return wakes


REPLIES = [
    "you can say okay nabu whenever you need me",
    "okay nabu is the name I answer to",
    "I heard you say okay nabu so here I am",
    "the timer is set and okay nabu will remind you",
    "to ask again just say okay nabu and wait for the chime",
    "okay nabu okay nabu that is what you say to wake me",
]


def room_scene(out_dir: str) -> None:
    """Self-wakes (bench/wake.sh): the assistant's replies, each saying "okay nabu",
    played by the speaker (speaker.wav) and heard by the board's microphone through a
    simulated room (mic.wav: the direct sound 4 ms later at -6 dB, a diffuse tail of
    RT60 0.4 s, a little noise); mic_user.wav is the same with the user saying "okay
    nabu" over six of the replies (another voice, from nearer). 48 kHz; the voice the
    reference wakes on (espeak-ng en-us, 140 wpm)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(12)
    up = lambda x: np.fft.irfft(np.fft.rfft(x), len(x) * 3) * 3
    speaker, user_at = [], []
    t = 48000
    speaker.append(np.zeros(t))
    for k in range(4):
        for reply in REPLIES:
            x = up(level(espeak(reply, "en-us", 140), -18))
            speaker += [x, np.zeros(int(rng.uniform(1.5, 3.0) * 48000))]
            if k == 0:
                user_at.append(t + len(x) // 3)
            t += len(x) + len(speaker[-1])
    spk = np.concatenate(speaker)
    # The room at 48 kHz: direct path, then an exponentially decaying diffuse tail.
    n = int(0.4 * 48000)
    h = rng.standard_normal(n) * np.exp(-6.9 * np.arange(n) / n) * 0.08
    h[: int(0.004 * 48000)] = 0
    h[int(0.004 * 48000)] = 0.5
    mic = np.convolve(spk, h)[: len(spk)] + level(rng.standard_normal(len(spk)), -60)
    user = up(level(espeak("okay nabu", "en-gb", 150), -20))
    mic_user = mic.copy()
    for at in user_at:
        mic_user[at: at + len(user)] += user[: len(mic_user) - at]
    import wave as w_
    for name, x in (("speaker", spk), ("mic", mic), ("mic_user", mic_user)):
        with w_.open(str(out / f"{name}.wav"), "wb") as f:
            f.setnchannels(1); f.setsampwidth(2); f.setframerate(48000)
            f.writeframes(np.clip(np.round(x), -32768, 32767).astype("<i2").tobytes())
    (out / "user-says-it.txt").write_text(f"{len(user_at)}\n")


def to16k(wav_path: str, raw_path: str) -> None:
    with wave.open(wav_path) as w:
        rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64)
    n = int(round(len(x) * RATE / rate))
    Path(raw_path).write_bytes(np.clip(np.round(np.fft.irfft(np.fft.rfft(x), n) * (n / len(x))), -32768, 32767).astype("<i2").tobytes())


def hands_free(out: str) -> None:
    """A hands-free turn at 48 kHz (the pipeline's rate): silence, the wake word as the
    reference fires on it (espeak-ng en-us, 140 wpm), a pause, a request in the speech
    judge's own user voice (Tests/Speech/speech.py), and the silence that ends the turn."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "Speech"))
    import speech
    wake = level(espeak("okay nabu", "en-us", 140), -26)
    wake48 = np.fft.irfft(np.fft.rfft(wake), len(wake) * 3) * 3
    request = speech.synth("turn on the kitchen light", "user").astype(np.float64)
    z = lambda seconds: np.zeros(int(seconds * 48000))
    speech.write_wav(out, np.concatenate([z(1.0), wake48, z(0.5), request, z(4.0)]), 48000)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "clips":
        clips(Path(sys.argv[2]), full="--set" in sys.argv and sys.argv[-1] == "full")
    elif len(sys.argv) == 4 and sys.argv[1] == "long":
        long_speech(sys.argv[2], float(sys.argv[3]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "events":
        for raw in sys.argv[3:]:
            print(events(sys.argv[2], raw))
    elif len(sys.argv) == 3 and sys.argv[1] == "room":
        room_scene(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "to16k":
        to16k(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "hands-free":
        hands_free(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "judge":
        judge(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
