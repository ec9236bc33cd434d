#!/usr/bin/env python3
"""A real loopback call for SECONDS (default 600) against `linnet answer` (echo), RSS of
the agent sampled every second from /proc. Prints BENCH soak_rss_growth_percent: the
mean RSS of the last minute against the mean of the second minute (the first holds
start-up), and the peak. Usage: bench/soak.py BINARY [SECONDS]"""
import math, os, signal, struct, subprocess, sys, tempfile, time, wave

binary = sys.argv[1]
seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 600
work = tempfile.mkdtemp()
tone = os.path.join(work, "tone.wav")
with wave.open(tone, "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(48000)
    w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / 48000))) for i in range(96000)))
ans = subprocess.Popen([binary, "answer", "--listen", "127.0.0.1:0", "--log-level", "error"], stdout=subprocess.PIPE, text=True)
port = int(ans.stdout.readline().split()[1])
agent = subprocess.Popen([binary, "run", "--whip", f"http://127.0.0.1:{port}/whip", "--input", tone, "--loop-input",
                          "--output", "/dev/null", "--seconds", str(seconds), "--log-level", "error"])


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


samples = []
start = time.monotonic()
while agent.poll() is None:
    try:
        samples.append(rss(agent.pid))
    except OSError:
        break
    # Sampling pace for a benchmark (not a test): one reading per second.
    time.sleep(max(0.0, start + len(samples) - time.monotonic()))
ans.send_signal(signal.SIGTERM)
ans.wait()
if len(samples) < 180:
    raise SystemExit(f"only {len(samples)} samples: the call ended early (exit {agent.returncode})")
second = samples[60:120]
last = samples[-60:]
growth = (sum(last) / len(last) - sum(second) / len(second)) * 100 / (sum(second) / len(second))
print("BENCH soak_rss_growth_percent %.2f %% (%d s call, RSS %d kB in minute 2, %d kB in the last, peak %d kB)"
      % (growth, len(samples), sum(second) // len(second), sum(last) // len(last), max(samples)))
