#!/usr/bin/env python3
"""Speech quality of the product's Opus encoder at several complexities, one BENCH line
per figure: a speech-like test signal (below) is encoded as Linnet encodes
(Sources/Codec/Opus.swift: 48 kHz mono, VOIP, signal voice, 32 kbit/s, in-band FEC
planned for 10 % loss), decoded, aligned to the input by cross-correlation, and compared:

  opus_c<N>_snr_db            aligned SNR over the whole signal (waveform match)
  opus_c<N>_lsd_db            spectral distortion in 300–7000 Hz: the RMS over 27
                              sixth-octave bands of 10·log10(input / output band
                              power), per 20 ms Hann frame, averaged over the frames
                              within 30 dB of the loudest

libopus is Debian's libopus0 (the same 1.3.1 the release binary links statically),
called through ctypes; numpy does the FFTs. The signal: a glottal pulse train whose
pitch glides between 95 and 230 Hz, through five vowel formant sets (F1–F4 resonators)
with syllable envelopes, fricative noise bursts (high-passed noise) and pauses; with a
fixed seed, so the figures repeat.

usage: opus-quality.py COMPLEXITY…
"""
import ctypes
import ctypes.util
import sys

import numpy as np

FS = 48000


def speech_like(seconds=8.0, seed=18):
    rng = np.random.default_rng(seed)
    n = int(FS * seconds)
    t = np.arange(n) / FS
    f0 = 160 + 65 * np.sin(2 * np.pi * 0.7 * t) * np.sin(2 * np.pi * 0.13 * t + 1)
    phase = np.cumsum(f0 / FS)
    pulses = np.diff(np.floor(phase), prepend=0.0)
    # A glottal pulse shape: the pulse train through a two-pole low-pass.
    src = np.zeros(n)
    y1 = y2 = 0.0
    for i in range(n):
        y = pulses[i] + 1.8 * y1 - 0.81 * y2
        src[i] = y
        y2, y1 = y1, y
    src = np.diff(src, prepend=0.0)  # lip radiation
    vowels = [(730, 1090, 2440, 3400), (270, 2290, 3010, 3700), (300, 870, 2240, 3300),
              (530, 1840, 2480, 3500), (570, 840, 2410, 3400)]
    out = np.zeros(n)
    syllable = int(0.22 * FS)
    pos = 0
    k = 0
    while pos < n:
        seg = min(syllable, n - pos)
        kind = k % 7
        if kind == 6:  # a pause
            pos += seg
            k += 1
            continue
        if kind == 3:  # a fricative: noise in 2.5–7 kHz, 12 dB below the vowels
            spectrum = np.fft.rfft(rng.standard_normal(seg))
            f = np.fft.rfftfreq(seg, 1 / FS)
            spectrum[(f < 2500) | (f > 7000)] = 0
            noise = np.fft.irfft(spectrum, seg)
            out[pos:pos + seg] += 0.25 * noise / np.sqrt(np.mean(noise ** 2)) * np.hanning(seg)
        else:
            x = src[pos:pos + seg]
            for fc, bw in zip(vowels[k % 5], (80, 100, 120, 150)):
                r = np.exp(-np.pi * bw / FS)
                a1, a2 = 2 * r * np.cos(2 * np.pi * fc / FS), -r * r
                y = np.zeros(seg)
                p1 = p2 = 0.0
                for i in range(seg):
                    v = x[i] + a1 * p1 + a2 * p2
                    y[i] = v
                    p2, p1 = p1, v
                x = y
            # Speech's spectrum falls above 4 kHz: the pulse train's harmonics past it
            # are cut, as a real voice's are by the vocal tract's losses.
            spectrum = np.fft.rfft(x)
            spectrum[np.fft.rfftfreq(seg, 1 / FS) > 5000] *= 0.05
            x = np.fft.irfft(spectrum, seg)
            out[pos:pos + seg] += x / np.sqrt(np.mean(x ** 2)) * np.hanning(seg)
        pos += seg
        k += 1
    out *= 0.5 * 32767 / np.max(np.abs(out))  # −6 dBFS peak
    return out.astype(np.int16)


def opus_roundtrip(pcm, complexity):
    lib = ctypes.CDLL(ctypes.util.find_library("opus") or "libopus.so.0")
    err = ctypes.c_int()
    lib.opus_encoder_create.restype = ctypes.c_void_p
    lib.opus_decoder_create.restype = ctypes.c_void_p
    enc = lib.opus_encoder_create(FS, 1, 2048, ctypes.byref(err))  # OPUS_APPLICATION_VOIP
    dec = lib.opus_decoder_create(FS, 1, ctypes.byref(err))
    ctl = lib.opus_encoder_ctl
    ctl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    for request, value in ((4002, 32000), (4010, complexity), (4012, 1), (4014, 10), (4024, 3001)):
        # OPUS_SET_BITRATE, _COMPLEXITY, _INBAND_FEC, _PACKET_LOSS_PERC, _SIGNAL(VOICE)
        assert ctl(enc, request, value) == 0
    lib.opus_encode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.opus_decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    frame = 960
    packet = ctypes.create_string_buffer(1275)
    out = np.zeros(len(pcm) + 2 * frame, dtype=np.int16)
    padded = np.concatenate([pcm, np.zeros(2 * frame, dtype=np.int16)])
    for f in range(len(padded) // frame):
        chunk = np.ascontiguousarray(padded[f * frame:(f + 1) * frame])
        n = lib.opus_encode(enc, chunk.ctypes.data, frame, packet, 1275)
        assert n > 0
        o = np.zeros(frame, dtype=np.int16)
        assert lib.opus_decode(dec, packet, n, o.ctypes.data, frame, 0) == frame
        out[f * frame:(f + 1) * frame] = o
    return out


def align(x, y, max_lag=2000):
    xs = x[:FS * 2].astype(float)
    best, lag = -1e300, 0
    for d in range(max_lag):
        c = float(np.dot(xs, y[d:d + len(xs)].astype(float)))
        if c > best:
            best, lag = c, d
    return y[lag:lag + len(x)].astype(float)


def measures(x, y):
    x = x.astype(float)
    snr = 10 * np.log10(np.sum(x * x) / np.sum((x - y) ** 2))
    n = 960
    w = np.hanning(n)
    freqs = np.fft.rfftfreq(n, 1 / FS)
    # Sixth-octave bands from 300 Hz to 7 kHz (27 bands): distortion of the spectral
    # envelope as an ear resolves it, not of single bins between harmonics.
    edges = 300 * 2 ** (np.arange(0, 28) / 6)
    edges[-1] = 7000
    bands = [np.nonzero((freqs >= lo) & (freqs < hi))[0] for lo, hi in zip(edges[:-1], edges[1:])]
    frame_energy = []
    lsd = []
    for f in range(len(x) // n):
        a = x[f * n:(f + 1) * n]
        b = y[f * n:(f + 1) * n]
        frame_energy.append(np.sum(a * a))
        pa = np.abs(np.fft.rfft(a * w)) ** 2
        pb = np.abs(np.fft.rfft(b * w)) ** 2
        ea = np.array([pa[i].sum() for i in bands]) + 1.0
        eb = np.array([pb[i].sum() for i in bands]) + 1.0
        lsd.append(np.sqrt(np.mean((10 * np.log10(ea / eb)) ** 2)))
    frame_energy = np.array(frame_energy)
    active = frame_energy > np.max(frame_energy) * 1e-3  # within 30 dB of the loudest
    return snr, float(np.mean(np.array(lsd)[active]))


def main():
    x = speech_like()
    for c in (int(a) for a in sys.argv[1:]):
        y = align(x, opus_roundtrip(x, c))
        snr, lsd = measures(x, y)
        print(f"BENCH opus_c{c}_snr_db {snr:.2f} dB")
        print(f"BENCH opus_c{c}_lsd_db {lsd:.2f} dB")


if __name__ == "__main__":
    main()
