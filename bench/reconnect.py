#!/usr/bin/env python3
"""BENCH reconnect_ms: `linnet answer` is killed (SIGKILL, no goodbye) mid-call and
started again on the same port; the figure is the time from its READY line to the
agent's next `connected` state event (audio switched to the new session), median of N
rounds. Usage: bench/reconnect.py BINARY [ROUNDS]"""
import json, os, signal, statistics, subprocess, sys, time

binary = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5


def answerer(port):
    p = subprocess.Popen([binary, "answer", "--listen", f"127.0.0.1:{port}", "--log-level", "error"],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("READY "), line
    return p, int(line.split()[1])


def wait_state(agent, state):
    for line in agent.stdout:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("type") == "state" and e.get("state") == state:
            return
    raise SystemExit(f"agent ended before '{state}'")


ans, port = answerer(0)
agent = subprocess.Popen([binary, "run", "--whip", f"http://127.0.0.1:{port}/whip", "--capture", "none",
                          "--playback", "none", "--events", "-", "--log-level", "error"],
                         stdout=subprocess.PIPE, text=True)
times = []
try:
    wait_state(agent, "connected")
    for _ in range(rounds):
        ans.send_signal(signal.SIGKILL)
        ans.wait()
        wait_state(agent, "disconnected")
        ans, _ = answerer(port)
        back = time.monotonic()
        wait_state(agent, "connected")
        times.append((time.monotonic() - back) * 1000)
finally:
    agent.send_signal(signal.SIGTERM)
    agent.wait(timeout=10)
    ans.send_signal(signal.SIGTERM)
    ans.wait(timeout=10)
print("BENCH reconnect_ms %.0f ms (median of %d; each: %s)" % (statistics.median(times), len(times),
                                                              ", ".join("%.0f" % t for t in times)))
