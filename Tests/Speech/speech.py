#!/usr/bin/env python3
"""Speech for Linnet's real-condition judges: the test sentences, their
voices (espeak-ng), and an intelligibility check on pocketsphinx 5.1.1 with a language
model restricted to the sentences and their distractors.

Why a restricted model: pocketsphinx's general English model does badly on espeak's
voice, so a low word error rate would need a good recogniser and a high one would say
nothing. Restricted to the test sentences *plus distractors that use the same frames*
("turn on the kitchen light" / "turn off the kitchen lights"), the recogniser must
still hear which words were said; a bigram model (not a sentence grammar) lets it drop
and insert words, so chopped or noisy audio comes out wrong instead of snapping to the
nearest whole sentence. `selfcheck()` shows it: clean audio scores well, chopped and
noisy audio badly (Tests/Speech/README.md has the figures).

Audio here is 48 kHz mono int16 numpy arrays unless said otherwise.

    python speech.py selfcheck [--json out.json]     # exit 1 if the judge cannot tell
    python speech.py synth OUT_DIR                   # every sentence as a 48 kHz WAV
    python speech.py recognize FILE.wav [--set user|assistant]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import wave
from collections import Counter, defaultdict
from typing import Optional

import numpy as np

RATE = 48000
ASR_RATE = 16000

# -- the sentences -------------------------------------------------------------------

# What the user asks (the talker), ten requests.
USER = [
    "turn on the kitchen light",
    "set a timer for five minutes",
    "what is the weather in paris",
    "play some music by the beatles",
    "call my sister on her phone",
    "add bread to the shopping list",
    "turn off the bedroom fan",
    "wake me up at seven tomorrow",
    "how far away is the moon",
    "open the garage door please",
]
# Same frames, other words: the recogniser must tell these from the above.
USER_DISTRACTORS = [
    "turn off the kitchen lights",
    "turn on the bedroom lamp",
    "set an alarm for nine minutes",
    "set a timer for fifteen seconds",
    "what is the time in london",
    "what is the weather in berlin",
    "play some songs by the rolling stones",
    "call my brother on his phone",
    "add apples to the shopping list",
    "remove eggs from the shopping list",
    "turn on the bathroom heater",
    "wake me up at six today",
    "how far away is the sun",
    "close the garage door now",
    "open the front window please",
]
# What the assistant answers: a greeting, then one reply per request.
ASSISTANT = [
    "hello there how can i help you today",
    "the kitchen light is now on and the room looks bright",
    "your timer is set and it will ring in five minutes",
    "it is sunny in paris with a high of twenty degrees",
    "here is a song by the beatles from their first album",
    "i am calling your sister on her mobile phone right now",
    "i added bread to your shopping list for tomorrow morning",
    "the bedroom fan is off and the room is quiet again",
    "i will wake you up at seven tomorrow with soft music",
    "the moon is about four hundred thousand kilometers away",
    "the garage door is opening now so please stand clear",
]
ASSISTANT_DISTRACTORS = [
    "hello again what can i do for you now",
    "the kitchen light is now off and the room looks dark",
    "your alarm is set and it will ring in nine minutes",
    "it is raining in london with a high of ten degrees",
    "here is a song by the rolling stones from their last album",
    "i am calling your brother on his home phone right now",
    "i added apples to your shopping list for tonight",
    "the bathroom heater is on and the room is warm again",
    "i will wake you up at six today with the radio",
    "the sun is about one hundred million kilometers away",
    "the garage door is closing now so please stand back",
]

VOICES = {"user": "en-us+m1", "assistant": "en-us+m1"}
PITCH = {"user": 50, "assistant": 60}
SPEED = {"user": 140, "assistant": 140}
LEVEL_DBFS = {"user": -26.0, "assistant": -22.0}  # RMS over the active part; 0 dBFS = full-scale square


def corpus(which: str) -> list[str]:
    return USER + USER_DISTRACTORS if which == "user" else ASSISTANT + ASSISTANT_DISTRACTORS


# -- WAV and resampling ----------------------------------------------------------------

def read_wav(path: str) -> tuple[np.ndarray, int]:
    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: need 16-bit PCM")
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        ch = w.getnchannels()
        if ch > 1:
            data = data.reshape(-1, ch).mean(axis=1).astype(np.int16)
        return data.copy(), w.getframerate()


def write_wav(path: str, samples: np.ndarray, rate: int = RATE) -> None:
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.clip(np.round(samples), -32768, 32767).astype("<i2").tobytes())


def resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Band-limited resampling of a whole (short, silence-padded) signal in the
    frequency domain: exact for the band both rates share, no dependency beyond numpy."""
    if src == dst or len(x) == 0:
        return x.astype(np.float64)
    n = len(x)
    m = int(round(n * dst / src))
    spec = np.fft.rfft(x.astype(np.float64))
    out = np.zeros(m // 2 + 1, dtype=complex)
    k = min(len(spec), len(out))
    out[:k] = spec[:k]
    if dst < src and k == len(out) and m % 2 == 0:
        out[-1] = out[-1].real  # the new Nyquist bin must be real
    return np.fft.irfft(out, m) * (m / n)


def active_rms_dbfs(x: np.ndarray, floor_dbfs: float = -60.0) -> float:
    """RMS (0 dBFS = full-scale square) over the 10 ms blocks louder than floor."""
    x = x.astype(np.float64)
    b = RATE // 100
    n = len(x) // b
    if n == 0:
        return -math.inf
    p = (x[: n * b].reshape(n, b) ** 2).mean(axis=1)
    thr = (32768.0 * 10 ** (floor_dbfs / 20)) ** 2
    act = p[p > thr]
    if len(act) == 0:
        return -math.inf
    return 10 * math.log10(act.mean() / 32768.0 ** 2)


# -- espeak-ng ---------------------------------------------------------------------------

def ensure_espeak() -> str:
    exe = shutil.which("espeak-ng")
    if exe:
        return exe
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("espeak-ng is missing: installing it with apt-get", file=sys.stderr)
        r = subprocess.run(["apt-get", "install", "-y", "-q", "espeak-ng"], stdout=sys.stderr)
        if r.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], stdout=sys.stderr)
            subprocess.run(["apt-get", "install", "-y", "-q", "espeak-ng"], stdout=sys.stderr, check=True)
        exe = shutil.which("espeak-ng")
    if not exe:
        raise SystemExit("error: espeak-ng is missing (apt-get install espeak-ng)")
    return exe


def speak_raw(text: str, role: str) -> np.ndarray:
    """espeak-ng's voice for `role`, at 48 kHz, float, edges trimmed to 30 ms of silence."""
    exe = ensure_espeak()
    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        subprocess.run([exe, "-v", VOICES[role], "-s", str(SPEED[role]), "-p", str(PITCH[role]), "-w", f.name, text], check=True)
        x, rate = read_wav(f.name)
    y = resample(x, rate, RATE)
    a = np.flatnonzero(np.abs(y) > 32768 * 10 ** (-60 / 20))
    if len(a):
        pad = RATE * 30 // 1000
        y = y[max(0, a[0] - pad): a[-1] + pad]
    return y


def synth(text: str, role: str) -> np.ndarray:
    """The sentence in `role`'s voice at its level (LEVEL_DBFS), int16, 48 kHz."""
    y = speak_raw(text, role)
    gain = 10 ** ((LEVEL_DBFS[role] - active_rms_dbfs(y)) / 20)
    return np.clip(np.round(y * gain), -32768, 32767).astype(np.int16)


def prefix_ends(text: str, role: str) -> list[float]:
    """Seconds at which each word ends, from prefixes synthesized alone ("w1", "w1 w2",
    …): the active length of each. A prefix ends with a sentence-final lengthening the
    full sentence does not have there, so these run late (0.1–0.3 s measured)."""
    words = text.split()
    ends = []
    for j in range(1, len(words) + 1):
        y = speak_raw(" ".join(words[:j]), role)
        ends.append(max(0.0, (len(y) - RATE * 30 // 1000) / RATE))
    return ends


def word_ends(text: str, role: str, audio: Optional[np.ndarray] = None) -> list[float]:
    """Seconds from the start of `audio` (synth(text, role) when not given) at which
    each word ends: a forced alignment of the audio to the text (pocketsphinx,
    set_align_text). Where the aligner skips a word (it may, on espeak's voice), that
    word's end comes from prefix_ends, kept between its aligned neighbours."""
    from pocketsphinx import Decoder
    if audio is None:
        audio = synth(text, role)
    words = text.split()
    tmp = tempfile.mkdtemp(prefix="linnet-align-")
    try:
        dic = os.path.join(tmp, "words.dict")
        write_dict([text], dic)
        dec = Decoder(hmm=os.path.join(model_dir(), "en-us"), dict=dic, samprate=ASR_RATE, loglevel="FATAL")
        y = resample(audio, RATE, ASR_RATE)
        dec.set_align_text(text)
        dec.start_utt()
        dec.process_raw(np.clip(np.round(y), -32768, 32767).astype("<i2").tobytes(), full_utt=True)
        dec.end_utt()
        segs = [(sg.word.split("(")[0], (sg.end_frame + 1) / 100.0) for sg in dec.seg()]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    aligned: list[Optional[float]] = []
    k = 0
    for w, e in segs:
        if k < len(words) and w == words[k]:
            aligned.append(e)
            k += 1
    aligned += [None] * (len(words) - len(aligned))
    if any(a is None for a in aligned):
        pre = prefix_ends(text, role)
        total = len(audio) / RATE
        for i, a in enumerate(aligned):
            if a is None:
                lo = max([x for x in aligned[:i] if x is not None] or [0.0])
                hi = min([x for x in aligned[i + 1:] if x is not None] or [total])
                aligned[i] = min(max(pre[i], lo), hi)
    out, last = [], 0.0
    for a in aligned:
        last = max(last, a)
        out.append(last)
    return out


# -- the recogniser ----------------------------------------------------------------------

def model_dir() -> str:
    from pocketsphinx import get_model_path
    return os.path.join(get_model_path(), "en-us")


def write_arpa(sentences: list[str], path: str, order: int = 3) -> None:
    """An n-gram ARPA model over the sentences, interpolated Witten–Bell, backing off to
    add-one unigrams over the whole vocabulary: any word may follow any other (so
    deletions and insertions can be recognised); the sentences' own orders are likelier."""
    counts: dict = defaultdict(Counter)  # history tuple -> next word counts
    uni = Counter()
    for s in sentences:
        w = ["<s>"] * (order - 1) + s.split() + ["</s>"]
        for i in range(order - 1, len(w)):
            uni[w[i]] += 1
            for n in range(1, order):
                h = tuple(w[i - n:i])
                if h.count("<s>") > 1 and h[-1] == "<s>" and len(set(h)) == 1 and n > 1:
                    continue  # "<s> <s>": only one start symbol is written
                counts[h][w[i]] += 1
    vocab = sorted(set(uni) | {"<s>"})
    total = sum(uni.values())
    p1 = {w: (uni[w] + 1) / (total + len(vocab)) for w in vocab}

    def prob(w: str, h: tuple) -> float:
        if not h:
            return p1[w]
        c = counts.get(h)
        lower = prob(w, h[1:])
        if not c:
            return lower
        n, t = sum(c.values()), len(c)
        lam = n / (n + t)
        return lam * c.get(w, 0) / n + (1 - lam) * lower

    grams: list[dict] = [dict() for _ in range(order + 1)]
    for w in vocab:
        grams[1][(w,)] = p1[w]
    for h, c in counts.items():
        for w in c:
            grams[len(h) + 1][h + (w,)] = prob(w, h)
    backoff: dict = {}
    for h, c in counts.items():
        seen = sum(prob(w, h) for w in c)
        seen_lower = sum(prob(w, h[1:]) for w in c)
        backoff[h] = (1 - seen) / (1 - seen_lower) if seen_lower < 1 else 1e-9
    with open(path, "w") as f:
        f.write("\\data\\\n")
        for n in range(1, order + 1):
            f.write(f"ngram {n}={len(grams[n])}\n")
        for n in range(1, order + 1):
            f.write(f"\n\\{n}-grams:\n")
            for g, p in sorted(grams[n].items()):
                line = f"{math.log10(p) if g != ('<s>',) else -99:.6f} {' '.join(g)}"
                if n < order:
                    line += f" {math.log10(max(backoff.get(g, 1.0), 1e-9)):.6f}"
                f.write(line + "\n")
        f.write("\n\\end\\\n")


def write_dict(sentences: list[str], path: str) -> None:
    words = sorted({w for s in sentences for w in s.split()})
    have: dict[str, list[str]] = defaultdict(list)
    want = set(words)
    with open(os.path.join(model_dir(), "cmudict-en-us.dict")) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            base = parts[0].split("(")[0]
            if base in want:
                have[base].append(" ".join(parts[1:]))
    missing = [w for w in words if w not in have]
    if missing:
        raise SystemExit(f"error: not in the pocketsphinx dictionary: {missing}")
    with open(path, "w") as f:
        for w in words:
            for i, pron in enumerate(have[w]):
                f.write(f"{w if i == 0 else f'{w}({i + 1})'} {pron}\n")


class Recognizer:
    """pocketsphinx with the bigram model of one sentence set (user or assistant)."""

    # Below this RMS over its loudest 300 ms the audio counts as silence: pocketsphinx
    # otherwise "hears" words in dither at -80 dBFS.
    GATE_DBFS = -55.0

    def __init__(self, which: str, workdir: Optional[str] = None) -> None:
        from pocketsphinx import Decoder
        self.which = which
        self.dir = workdir or tempfile.mkdtemp(prefix=f"linnet-asr-{which}-")
        os.makedirs(self.dir, exist_ok=True)
        lm = os.path.join(self.dir, f"{which}.arpa")
        dic = os.path.join(self.dir, f"{which}.dict")
        write_arpa(corpus(which), lm)
        write_dict(corpus(which), dic)
        self.decoder = Decoder(hmm=os.path.join(model_dir(), "en-us"), lm=lm, dict=dic, loglevel="FATAL",
                               samprate=ASR_RATE)

    @classmethod
    def gated(cls, x: np.ndarray) -> bool:
        x = x.astype(np.float64)
        w = RATE * 3 // 10
        if len(x) < w:
            w = max(1, len(x))
        c = np.cumsum(np.concatenate([[0.0], x * x]))
        loudest = (c[w:] - c[:-w]).max() / w if len(x) >= w else 0.0
        return loudest < (32768.0 * 10 ** (cls.GATE_DBFS / 20)) ** 2

    def recognize(self, x: np.ndarray) -> list[str]:
        if len(x) < RATE // 10 or self.gated(x):
            return []
        y = resample(x, RATE, ASR_RATE)
        pad = np.zeros(ASR_RATE // 5)
        y = np.concatenate([pad, y, pad])
        pcm = np.clip(np.round(y), -32768, 32767).astype("<i2").tobytes()
        self.decoder.start_utt()
        self.decoder.process_raw(pcm, full_utt=True)
        self.decoder.end_utt()
        hyp = self.decoder.hyp()
        if hyp is None:
            return []
        return [w for w in hyp.hypstr.split() if not w.startswith("<") and not w.startswith("[")]


def edit_counts(ref: list[str], hyp: list[str]) -> tuple[int, int, int]:
    """(substitutions, deletions, insertions) of a minimal word alignment."""
    n, m = len(ref), len(hyp)
    d = [[(0, 0, 0, 0)] * (m + 1) for _ in range(n + 1)]  # (cost, S, D, I)
    for i in range(1, n + 1):
        d[i][0] = (i, 0, i, 0)
    for j in range(1, m + 1):
        d[0][j] = (j, 0, 0, j)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            c, s, de, ins = d[i - 1][j - 1]
            best = (c, s, de, ins) if ref[i - 1] == hyp[j - 1] else (c + 1, s + 1, de, ins)
            c, s, de, ins = d[i - 1][j]
            if c + 1 < best[0]:
                best = (c + 1, s, de + 1, ins)
            c, s, de, ins = d[i][j - 1]
            if c + 1 < best[0]:
                best = (c + 1, s, de, ins + 1)
            d[i][j] = best
    _, s, de, ins = d[n][m]
    return s, de, ins


def wer(pairs: list[tuple[list[str], list[str]]]) -> tuple[float, int, int]:
    """WER = (S + D + I) / N over all (reference, hypothesis) pairs; also errors and N."""
    errors = n = 0
    for ref, hyp in pairs:
        s, d, i = edit_counts(ref, hyp)
        errors += s + d + i
        n += len(ref)
    return (errors / n if n else 0.0), errors, n


# -- degradations for the self-check ----------------------------------------------------------

def chop_start(x: np.ndarray, seconds: float = 0.5) -> np.ndarray:
    """The sentence's first `seconds` of speech replaced by silence."""
    y = x.copy()
    a = np.flatnonzero(np.abs(y) > 100)
    start = a[0] if len(a) else 0
    y[start: start + int(seconds * RATE)] = 0
    return y


def zero_frames(x: np.ndarray, fraction: float = 0.3, seed: int = 1) -> np.ndarray:
    """`fraction` of its 20 ms frames zeroed (seeded)."""
    y = x.copy()
    f = RATE // 50
    rng = np.random.default_rng(seed)
    for k in range(len(y) // f):
        if rng.random() < fraction:
            y[k * f:(k + 1) * f] = 0
    return y


def add_noise(x: np.ndarray, snr_db: float = 0.0, seed: int = 1, babble: Optional[np.ndarray] = None) -> np.ndarray:
    """White noise (or `babble`) at `snr_db` against the speech's active RMS."""
    rng = np.random.default_rng(seed)
    if babble is None:
        n = rng.standard_normal(len(x))
    else:
        reps = int(np.ceil(len(x) / len(babble)))
        n = np.tile(babble.astype(np.float64), reps)[: len(x)]
    s_db = active_rms_dbfs(x)
    n_rms = 32768.0 * 10 ** ((s_db - snr_db) / 20)
    n = n / max(np.sqrt((n ** 2).mean()), 1e-9) * n_rms
    return np.clip(np.round(x.astype(np.float64) + n), -32768, 32767).astype(np.int16)


def babble_noise(seconds: float = 6.0) -> np.ndarray:
    """Four distractor sentences spoken at once (other voices), as babble."""
    parts = []
    for k, (text, role) in enumerate([(USER_DISTRACTORS[0], "assistant"), (USER_DISTRACTORS[3], "user"),
                                      (ASSISTANT_DISTRACTORS[2], "assistant"), (USER_DISTRACTORS[7], "user")]):
        y = synth(text, role).astype(np.float64)
        parts.append(np.roll(np.tile(y, int(np.ceil(seconds * RATE / len(y))))[: int(seconds * RATE)], k * 7919))
    return np.sum(parts, axis=0)


# condition: (lowest allowed, highest allowed) WER. Clean speech must be understood;
# damaged speech must not be (else the judge could not see damage).
SELF_CHECK_LIMITS = {
    "clean": (0.0, 0.10),
    "chopped_0.5s": (0.20, None),
    "zeroed_30pct_frames": (0.20, None),
    "white_0dB": (0.20, None),
    "babble_0dB": (0.20, None),
}


def selfcheck(roles=("user", "assistant")) -> dict:
    """Shows the judge can fail: each role's sentences clean, chopped (first 0.5 s of
    each silenced), with 30 % of 20 ms frames zeroed, and at 0 dB SNR of white noise
    and of babble; and -80 dBFS dither must give no words. Returns per role and
    condition the WER and whether it is within SELF_CHECK_LIMITS."""
    babble = babble_noise()
    out: dict = {}
    ok = True
    for role in roles:
        rec = Recognizer(role)
        sents = USER if role == "user" else ASSISTANT
        clean = [synth(s, role) for s in sents]
        conditions = {
            "clean": clean,
            "chopped_0.5s": [chop_start(x) for x in clean],
            "zeroed_30pct_frames": [zero_frames(x, 0.3, seed=k) for k, x in enumerate(clean)],
            "white_0dB": [add_noise(x, 0.0, seed=k) for k, x in enumerate(clean)],
            "babble_0dB": [add_noise(x, 0.0, seed=k, babble=babble) for k, x in enumerate(clean)],
        }
        for name, signals in conditions.items():
            pairs = [(s.split(), rec.recognize(x)) for s, x in zip(sents, signals)]
            w, e, n = wer(pairs)
            lo, hi = SELF_CHECK_LIMITS[name]
            good = (lo is None or w >= lo) and (hi is None or w <= hi)
            ok &= good
            out[f"{role}/{name}"] = {"wer": round(w, 4), "errors": e, "words": n, "within_limits": good,
                                     "limits": [lo, hi], "hypotheses": [" ".join(h) for _, h in pairs]}
        # the gate: -80 dBFS dither must give no words at all
        rng = np.random.default_rng(7)
        dither = np.round(rng.standard_normal(RATE * 2) * 32768 * 10 ** (-80 / 20)).astype(np.int16)
        words = rec.recognize(dither)
        out[f"{role}/dither_-80dBFS"] = {"words": words, "within_limits": words == []}
        ok &= words == []
    out["ok"] = ok
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("selfcheck")
    s.add_argument("--json")
    s = sub.add_parser("synth")
    s.add_argument("out")
    s = sub.add_parser("recognize")
    s.add_argument("wav")
    s.add_argument("--set", default="user", choices=["user", "assistant"])
    a = ap.parse_args(argv)
    if a.cmd == "selfcheck":
        r = selfcheck()
        for name, v in r.items():
            if name == "ok":
                continue
            if "wer" in v:
                print(f"{name:32s} WER {v['wer']:.3f} ({v['errors']}/{v['words']}) {'ok' if v['within_limits'] else 'OUT OF LIMITS'} limits {v['limits']}")
            else:
                print(f"{name:32s} words {v['words']} {'ok' if v['within_limits'] else 'OUT OF LIMITS'}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(r, f, indent=1)
        print("selfcheck: " + ("the judge tells clean from damaged speech" if r["ok"] else "FAILED"))
        return 0 if r["ok"] else 1
    if a.cmd == "synth":
        os.makedirs(a.out, exist_ok=True)
        for role, sents in (("user", USER), ("assistant", ASSISTANT)):
            for k, text in enumerate(sents):
                write_wav(os.path.join(a.out, f"{role}{k:02d}.wav"), synth(text, role))
        return 0
    if a.cmd == "recognize":
        x, rate = read_wav(a.wav)
        if rate != RATE:
            x = resample(x, rate, RATE)
        print(" ".join(Recognizer(a.set).recognize(x)))
        return 0
    return 64


if __name__ == "__main__":
    sys.exit(main())
