#!/usr/bin/env python3
"""The measured reason Linnet's echo canceller is speexdsp's MDF: WebRTC's
legacy AEC and AECM (Debian 12's webrtc-audio-processing 0.3) and, where the `livekit`
Python package is installed, WebRTC's AEC3 (libwebrtc's AudioProcessing with echo
cancellation, as livekit's FFI builds it: not packaged in Debian 12), on the echo-path
simulation of Tests/AudioTests/EchoSimulation.swift, ported to numpy (sim.py; the same
model, not the same samples), at 16 kHz, 10 ms frames, the far end alone for 12 s then
double talk. speexdsp's figures are in EchoCancellerTests.

speexdsp's MDF runs on the same signals for comparison (Debian's float build through
ctypes, told the delay: speexdsp as published, without Linnet's tuning, whose figures
are EchoCancellerTests' and `make bench`'s aec_rooms_*). Prints per room, delay and
canceller: ERLE over the last 4 s of far end alone, the time to 20 dB (first 500 ms
window), and the near end's SNR in double talk with the echo and with no echo in the
microphone at all (the same far end playing), twice: aligned (one lag, no gain), and
fitted (the best 64-tap filter from the output to the near end, so that a canceller's
high-pass or band split, a linear filter, does not count as lost near end).

usage: apt-get install libwebrtc-audio-processing-dev python3-numpy python3-scipy
       [pip install livekit]
       bench/aec-compare/run.py      (not part of make bench: neither library is a
       dependency of Linnet)
"""
import os, subprocess, sys, tempfile
import numpy as np
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from sim import MDF, scenario, erle, convergence, snr

work = tempfile.mkdtemp()
exe = os.path.join(work, "webrtc_aec")
flags = subprocess.run(["pkg-config", "--cflags", "--libs", "webrtc-audio-processing"], capture_output=True, text=True, check=True).stdout.split()
subprocess.run(["g++", "-O2", "-o", exe, os.path.join(here, "webrtc_aec.cc")] + flags, check=True)
fs = 16000
try:
    from livekit import rtc
except ImportError:
    rtc = None


def aec3(mic, ref):
    """WebRTC's AEC3 (libwebrtc AudioProcessing, echo cancellation only), frame by frame:
    the far end's 10 ms, then the microphone's; the delay is AEC3's own estimate."""
    apm = rtc.AudioProcessingModule(echo_cancellation=True)
    out = mic.copy()
    for i in range(0, len(mic) - 159, 160):
        apm.process_reverse_stream(rtc.AudioFrame(ref[i:i + 160].tobytes(), fs, 1, 160))
        apm.set_stream_delay_ms(0)
        frame = rtc.AudioFrame(mic[i:i + 160].tobytes(), fs, 1, 160)
        apm.process_stream(frame)
        out[i:i + 160] = np.frombuffer(bytes(frame.data), np.int16)
    return out


def fitted_snr(near, out, a, b, taps=64, lags=400):
    """The near end's SNR in out[a:b] after the best `taps`-tap filter from out to it,
    centred on the lag of the strongest correlation."""
    t = near[a:b].astype(float)
    lag = max(range(lags), key=lambda L: np.dot(t, out[a + L:b + L].astype(float)))
    lo = lag - taps // 2
    X = np.stack([out[a + lo + k:b + lo + k].astype(float) for k in range(taps)], 1)
    w, *_ = np.linalg.lstsq(X, t, rcond=None)
    return 10 * np.log10(np.sum(t ** 2) / np.sum((t - X @ w) ** 2))


for rt in [0.2, 0.5]:
    for d in [0.02, 0.12, 0.25]:
        s = scenario(rt60=rt, delay=d)
        ns = 12 * fs
        s["ref"].tofile(os.path.join(work, "ref.raw"))
        for name, mic in [("echo", s["mic"]), ("clean", s["clean"])]:
            mic.tofile(os.path.join(work, "mic.raw"))
            for cfg, level, mobile in [("aec-high", "2", "0"), ("aec-moderate", "1", "0"), ("aecm", "0", "1")]:
                subprocess.run([exe, os.path.join(work, "mic.raw"), os.path.join(work, "ref.raw"),
                                os.path.join(work, f"out_{name}_{cfg}.raw"), level, mobile], check=True)
        # speexdsp's MDF on the same signals, told the delay (Linnet finds it; here it is
        # given, less Linnet's 20 ms margin), 250 ms filter.
        for name, mic in [("echo", s["mic"]), ("clean", s["clean"])]:
            m = MDF(160, fs // 4, fs)
            delay = int((d - 0.02) * fs)
            ref = np.concatenate([np.zeros(delay, np.int16), s["ref"]])[:len(s["ref"])]
            y = mic.copy()
            for i in range(0, len(y) - 159, 160):
                y[i:i + 160] = m.run(mic[i:i + 160], ref[i:i + 160])
            y.tofile(os.path.join(work, f"out_{name}_speexdsp.raw"))
            if rtc:
                aec3(mic, s["ref"]).tofile(os.path.join(work, f"out_{name}_aec3.raw"))
        for cfg in ["speexdsp", "aec-high", "aec-moderate", "aecm"] + (["aec3"] if rtc else []):
            out = np.fromfile(os.path.join(work, f"out_echo_{cfg}.raw"), np.int16)
            clean = np.fromfile(os.path.join(work, f"out_clean_{cfg}.raw"), np.int16)
            n = len(out)
            ss = dict(s); ss["mic"] = s["mic"][:n]; ss["echo"] = s["echo"][:n]
            lag = max(range(400), key=lambda L: np.dot(s["near"][ns:ns + 2 * fs].astype(float), clean[ns + L:ns + L + 2 * fs].astype(float)))
            print(f"rt60 {rt} s delay {int(d * 1000)} ms {cfg}: ERLE {erle(s['mic'][:n], out, ns - 4 * fs, ns):.1f} dB, "
                  f"20 dB after {convergence(ss, out)} s, double-talk SNR {snr(s['near'][:n - lag], out[lag:], ns, n - lag - 160):.1f} dB "
                  f"(no echo {snr(s['near'][:n - lag], clean[lag:], ns, n - lag - 160):.1f} dB), "
                  f"fitted {fitted_snr(s['near'], out, ns + fs // 2, n - 2 * fs):.1f} dB "
                  f"(no echo {fitted_snr(s['near'], clean, ns + fs // 2, n - 2 * fs):.1f} dB)", flush=True)
