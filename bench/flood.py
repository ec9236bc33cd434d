#!/usr/bin/env python3
"""Linnet under streams that never run dry (docs/RELIABILITY.md "Attacks and floods").

Two floods from Tests/Interop/hostile_server.py, each against `linnet run` for
--seconds (default 15) on loopback:
  tcp  the answer's only candidate is a TCP passive one that sends empty RFC 4571
       frames without end (the session stays connecting);
  turn a configured TURN server over TCP sends empty ChannelData without end, while the
       call runs over UDP with audio from a file.
For each: Linnet's CPU (user + system, from /proc/PID/stat, as a share of one core)
and peak RSS over the flood, the bytes the flood sent, whether stats lines kept coming
(the loop kept turning), and the time from SIGTERM to exit.

usage: bench/flood.py LINNET [--seconds N]   → BENCH flood_<kind>_<figure> lines
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import wave

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def ready(proc):
    line = proc.stdout.readline().split()
    if not line or line[0] != "READY":
        raise SystemExit(f"not ready: {line}")
    return line


def run(kind, linnet, seconds, tmp):
    answer = subprocess.Popen([linnet, "answer", "--listen", "127.0.0.1:0", "--mode", "echo"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    up = ready(answer)[1]
    log = os.path.join(tmp, f"{kind}-requests.jsonl")
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/Interop/hostile_server.py"), "--mode", f"{kind}-flood",
                               "--log", log, "--upstream", f"http://127.0.0.1:{up}"], stdout=subprocess.PIPE, text=True)
    fields = ready(server)
    args = [linnet, "run", "--whip", f"http://127.0.0.1:{fields[1]}/whip", "--playback", "none", "--events", "-",
            "--stats-seconds", "1", "--status-file", os.path.join(tmp, f"{kind}-status.json")]
    if kind == "turn":
        tone = os.path.join(tmp, "tone.wav")
        with wave.open(tone, "wb") as w:
            w.setnchannels(1); w.setsampwidth(2); w.setframerate(48000)
            w.writeframes(b"\x00\x10\x00\xf0" * 48000)
        args += ["--input", tone, "--loop-input", "--ice-server", f"turn:127.0.0.1:{fields[3]}?transport=tcp",
                 "--ice-username", "u", "--ice-credential", "p"]
    else:
        args += ["--capture", "none"]
    linnet_p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stats = []
    threading.Thread(target=lambda: [stats.append(l) for l in linnet_p.stdout if '"stats"' in l], daemon=True).start()
    time.sleep(2)  # past set-up: the flood has begun
    c0, t0, peak = cpu_seconds(linnet_p.pid), time.monotonic(), 0
    s0 = len(stats)
    while time.monotonic() - t0 < seconds:
        peak = max(peak, rss_kb(linnet_p.pid))
        time.sleep(0.5)
    cpu = (cpu_seconds(linnet_p.pid) - c0) / (time.monotonic() - t0)
    ticks = len(stats) - s0
    received = None
    if stats:
        try:
            received = json.loads(stats[-1]).get("packets_received")
        except ValueError:
            pass
    term = time.monotonic()
    linnet_p.send_signal(signal.SIGTERM)
    try:
        status = linnet_p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        linnet_p.kill()
        status = linnet_p.wait()
    exit_ms = (time.monotonic() - term) * 1000
    server.terminate(); server.wait()
    answer.terminate(); answer.wait()
    sent = 0
    with open(log) as f:
        for line in f:
            e = json.loads(line)
            if e.get("listener") == "flood":
                sent += e.get("sent", 0)
    print(f"BENCH flood_{kind}_cpu_share {cpu:.2f} core")
    print(f"BENCH flood_{kind}_rss_peak_kb {peak} kB")
    print(f"BENCH flood_{kind}_stats_lines {ticks} lines_in_{seconds:.0f}s")
    if kind == "turn" and received is not None:
        print(f"BENCH flood_{kind}_packets_received {received} packets")
    print(f"BENCH flood_{kind}_sigterm_exit_ms {exit_ms:.0f} ms")
    print(f"BENCH flood_{kind}_exit_status {status} status")
    print(f"BENCH flood_{kind}_bytes_flooded {sent} bytes")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("linnet")
    p.add_argument("--seconds", type=float, default=15)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("tcp", "turn"):
            run(kind, os.path.abspath(a.linnet), a.seconds, tmp)


if __name__ == "__main__":
    main()
