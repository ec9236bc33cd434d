#!/usr/bin/env python3
"""Judges one push-to-talk exchange of the virtual board (guest/vboard-ptt.sh).

judge.py OUT.wav OUT.marks OUT.led

The recording is what the board's speaker played: the host answerer's echo of what it
heard from the board. The button was released, held, released, held, released.

- Sound: the recording must hold exactly two stretches of the tone, each about as long
  as the button was held, with silence before, between and after. Stretches are found
  in the recording itself rather than at the guest's clock times: the loopback's
  capture runs on the clock of what Linnet plays, so a stall of Linnet's playback (the
  card just returned, TCG starved) shifts the recording against the guest's clock.
  Digital zero (a dropout: nothing was played at all) counts as neither tone nor
  silence; the call's own silence is Opus's, some -110 dBFS.
- LED (one plain GPIO LED: "listening" steady on, "muted" off), sampled on the guest's
  clock as the button was: on for at least 90 % of each held phase, never on in a
  released one, after a settling margin at each end.

Prints one line; exit 1 when something is wrong.
"""
import math, struct, sys, wave

FRAME = 0.1            # s a level is measured over
TONE_DBFS = -30.0      # the tone (played at -6 dBFS) came back
SILENT_DBFS = -50.0    # nothing came back
GAP = 0.5              # s of silence that ends a stretch of tone
TOLERANCE = 1.2        # s a stretch may differ from how long the button was held
MARGIN, END_MARGIN = 1.5, 0.6   # s: the LED settles after a press or release

wav, marks_path, led_path = sys.argv[1:4]
marks = [l.split() for l in open(marks_path) if l.strip()]
phases = [(m[0], float(m[1])) for m in marks if m[0] in ("held", "released")]
end = float(next(m[1] for m in marks if m[0] == "end"))
bounds = [(name, t, phases[i + 1][1] if i + 1 < len(phases) else end) for i, (name, t) in enumerate(phases)]
held = [t1 - t0 for name, t0, t1 in bounds if name == "held"]

w = wave.open(wav)
rate, n, ch = w.getframerate(), w.getnframes(), w.getnchannels()
samples = struct.unpack("<%dh" % (n * ch), w.readframes(n))[::ch]
step = int(rate * FRAME)
kinds = []   # per frame: "tone", "quiet", "zero" or "mid"
for i in range(0, len(samples) - step + 1, step):
    seg = samples[i:i + step]
    if not any(seg):
        kinds.append("zero")
        continue
    dbfs = 20 * math.log10(max(math.sqrt(sum(s * s for s in seg) / step), 1e-9) / 32768)
    kinds.append("tone" if dbfs >= TONE_DBFS else "quiet" if dbfs <= SILENT_DBFS else "mid")

# Stretches of tone: tone frames, joined across anything but GAP of silence (dropouts
# inside a stretch are the emulated board falling behind, not the button).
runs = []
for i, k in enumerate(kinds):
    if k != "tone":
        continue
    if runs and sum(1 for x in kinds[runs[-1][1]:i] if x == "quiet") * FRAME < GAP:
        runs[-1][1] = i + 1
    else:
        runs.append([i, i + 1])
quiet = sum(1 for k in kinds if k == "quiet")
problems = []
if len(runs) != 2:
    problems.append(f"{len(runs)} stretches of tone, not 2")
else:
    for (a, b), h in zip(runs, held):
        # Dropouts inside a stretch are time the recording gained while playback
        # stalled, not time the tone was sent: they do not count.
        d = sum(1 for k in kinds[a:b] if k != "zero") * FRAME
        if abs(d - h) > TOLERANCE:
            problems.append(f"a {d:.1f} s stretch for a {h:.1f} s hold")
    if not any(k == "quiet" for k in kinds[:runs[0][0]]) or not any(k == "quiet" for k in kinds[runs[0][1]:runs[1][0]]) \
            or not any(k == "quiet" for k in kinds[runs[1][1]:]):
        problems.append("no silence around a stretch of tone")
lengths = [sum(1 for k in kinds[a:b] if k != "zero") * FRAME for a, b in runs]
sound = f"tone {' + '.join(f'{d:.1f}' for d in lengths)} s for holds of {' + '.join(f'{h:.1f}' for h in held)} s, " \
        f"{quiet * FRAME:.1f} s silent, {kinds.count('zero') * FRAME:.1f} s dropouts"

leds = [(float(a), b) for a, b in (l.split() for l in open(led_path) if len(l.split()) == 2)]
lit = []
for name, t0, t1 in bounds:
    v = [x for t, x in leds if t0 + MARGIN <= t <= t1 - END_MARGIN]
    on = sum(1 for x in v if x == "1") / max(len(v), 1)
    good = bool(v) and (on >= 0.9 if name == "held" else on == 0)
    if not good:
        problems.append(f"LED {on:.0%} on while {name}")
    lit.append(f"{on:.0%}")
print(f"tone heard only while held ({sound}); LED on {'/'.join(lit)} of released/held/released/held/released"
      + ("" if not problems else "; WRONG: " + ", ".join(problems)))
sys.exit(1 if problems else 0)
