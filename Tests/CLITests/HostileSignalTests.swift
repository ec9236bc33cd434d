import Testing
import Foundation
import Glibc
import CSystem
import Platform
import Signaling
import Audio
import Devices
import Wire
@testable import linnet
@testable import Runtime

// Signals, closed pipes, failing outputs.

@Suite(.serialized) struct SignalAndOutputTests {
    func tone(_ name: String, seconds: Double = 2) throws -> String {
        let path = temporary(name)
        try WAVFile.write(path, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(440, amplitude: 0.25, seconds: seconds, rate: 48_000).map { Int32($0 * 32_767) })
        return path
    }

    /// The provider saw the session's DELETE (`linnet answer --log-level debug` logs
    /// each request).
    func deleted(_ answerer: Child) -> Bool { answerer.stderr.contains("answer: DELETE /whip/") }

    /// `linnet run --events - | head -1`: the reader goes away after one line. Before:
    /// SIGPIPE killed Linnet (exit 141) with no DELETE, the status file at `connected`
    /// and a WAV header of 0 bytes. Now the events output ends (said once), the call
    /// goes on to its end, and everything is closed properly.
    @Test func eventsToAClosedPipeEndTheEventsNotTheCall() throws {
        let answerer = try Child(["answer", "--listen", "127.0.0.1:0", "--log-level", "debug"], name: "epipe-answer")
        guard let ready = answerer.waitFor({ $0.hasPrefix("READY ") }) else { Issue.record("answerer did not start"); return }
        let port = ready.dropFirst(6)
        let input = try tone("epipe-in.wav"), output = temporary("epipe-out.wav"), status = temporary("epipe-status.json")
        defer { unlink(input); unlink(output); unlink(status) }
        let agent = try Child(["run", "--whip", "http://127.0.0.1:\(port)/whip", "--input", input, "--loop-input", "--output", output,
                               "--events", "-", "--status-file", status, "--seconds", "2"], name: "epipe-run")
        #expect(agent.nextLine() != nil)
        agent.closeOutput()
        let exit = agent.wait()
        #expect(exit == 0, "exit \(exit): \(agent.stderr)")
        let said = agent.stderr.components(separatedBy: "--events: the reader of standard output went away").count - 1
        #expect(said == 1, "\(agent.stderr)")
        #expect(agent.stderr.contains("ending after 2 s (--seconds)"), "the call went on to its end: \(agent.stderr)")
        #expect(deleted(answerer), "\(answerer.stderr)")
        #expect(statusFileState(status) == "closed")
        let w = try wavLengths(output)
        #expect(w.header > 48_000 * 2 && w.header == w.actual, "WAV header \(w.header), data \(w.actual)")
    }

    /// `kill -HUP`: a clean stop (not a reload). Before: exit 129 with no DELETE, the
    /// status file at `connected`, a 0-byte WAV header.
    @Test func sighupIsACleanStop() throws {
        let answerer = try Child(["answer", "--listen", "127.0.0.1:0", "--log-level", "debug"], name: "hup-answer")
        guard let ready = answerer.waitFor({ $0.hasPrefix("READY ") }) else { Issue.record("answerer did not start"); return }
        let port = ready.dropFirst(6)
        let input = try tone("hup-in.wav"), output = temporary("hup-out.wav"), status = temporary("hup-status.json")
        defer { unlink(input); unlink(output); unlink(status) }
        let agent = try Child(["run", "--whip", "http://127.0.0.1:\(port)/whip", "--input", input, "--loop-input", "--output", output,
                               "--events", "-", "--stats-seconds", "1", "--status-file", status], name: "hup-run")
        // Audio has come back before the signal (a stats line with packets received).
        #expect(agent.waitFor { ($0.contains("\"stats\"") && (event($0)?["packets_received"] as? Int ?? 0) > 10) } != nil)
        agent.signal(SIGHUP)
        let exit = agent.wait()
        #expect(exit == 0, "exit \(exit): \(agent.stderr)")
        #expect(agent.stderr.contains("stopping (SIGHUP: a stop, not a reload)"))
        #expect(agent.rest().contains { isState($0, "closed") })
        #expect(deleted(answerer), "\(answerer.stderr)")
        #expect(statusFileState(status) == "closed")
        let w = try wavLengths(output)
        #expect(w.header > 0 && w.header == w.actual, "WAV header \(w.header), data \(w.actual)")
        // The answerer stops cleanly on SIGHUP too.
        answerer.signal(SIGHUP)
        #expect(answerer.wait() == 0, "\(answerer.stderr)")
    }

    /// `--events /dev/full`: every event lost with exit 0 and no word. Now: said once,
    /// with the path and the reason; the demo still goes both ways.
    @Test func eventsToAFullDeviceAreReportedOnce() throws {
        let output = temporary("full-demo.wav")
        defer { unlink(output) }
        let r = try runBounded(["demo", "--seconds", "1", "--events", "/dev/full", "--output", output], limit: 60, name: "events-full")
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.contains("demo: ok, audio went both ways"))
        let line = "--events '/dev/full': No space left on device; no more events are written, the call goes on"
        #expect(r.err.components(separatedBy: line).count == 2, "\(r.err)")
    }

    /// `--output` that stops being writable mid-call: here a file-size limit (ulimit -f,
    /// systemd's LimitFSIZE=), the unprivileged stand-in for a full filesystem. Before:
    /// SIGXFSZ killed Linnet (a full disk: silently short). Now: said once (path,
    /// strerror), the call goes on to its end, the header matches what was written, and
    /// the exit status is 74 (EX_IOERR: the recording is incomplete).
    /// An output that opens but takes nothing (`/dev/full`): the recording failed, which
    /// is EX_IOERR (74) as for a disk that fills mid-call, not a configuration (78).
    @Test func outputToDevFullExits74() throws {
        let input = temporary("devfull-in.wav")
        defer { unlink(input) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16, samples: [Int32](repeating: 0, count: 4_800))
        for args in [["audio", "--input", input, "--output", "/dev/full"],
                     ["run", "--whip", "http://127.0.0.1:9/whip", "--input", input, "--output", "/dev/full", "--max-attempts", "1",
                      "--status-file", temporary("devfull-status.json")]] {
            let r = try runBounded(args, limit: 30, name: "devfull")
            #expect(r.status == 74, "\(args[0]): exit \(r.status), \(r.err)")
            #expect(r.err.contains("'/dev/full': cannot write: No space left on device"), "\(r.err)")
        }
    }

    @Test func outputThatFillsUpIsReportedAndExits74() throws {
        let output = temporary("limited-demo.wav")
        defer { unlink(output) }
        let command = "ulimit -f 64 && exec '\(Linnet.executable.path)' demo --seconds 2 --output '\(output)' --events /dev/null"
        let r = try runBounded(["-c", command], executable: "/bin/sh", limit: 60, name: "output-limited")
        #expect(r.status == 74, "exit \(r.status): \(r.err)")
        let stops = r.err.components(separatedBy: "--output '\(output)': File too large; the recording stops at").count - 1
        #expect(stops == 1, "\(r.err)")
        #expect(r.err.contains("the recording '\(output)' is incomplete: File too large after"), "\(r.err)")
        #expect(r.out.contains("demo: sent"), "the call went on: \(r.out)")
        let w = try wavLengths(output)
        #expect(w.header > 0 && w.actual - w.header <= 1, "WAV header \(w.header), data \(w.actual)")
    }
}

/// A sound device that is not there when run starts (a USB microphone pulled, a board's
/// asound.conf not installed yet) is waited for, said once in the log, in systemd's
/// STATUS= and in the events: exiting made systemd restart it until its start limit,
/// after which it stayed failed even once the device was back. When the device appears
/// the call goes on; a stop signal ends the wait cleanly (exit 0).
@Suite(.serialized) struct MissingDeviceTests {
    func home(_ name: String) throws -> String {
        let dir = temporary("missing-device-\(name)")
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    @Test func aDeviceThatAppearsIsWaitedFor() throws {
        let dir = try home("appears")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // What a run the watchdog killed mid-call leaves behind (the unit keeps /run/linnet).
        try #"{"state":"connected","since_s":40,"muted":false,"session":3}"#.write(toFile: dir + "/status.json", atomically: true, encoding: .utf8)
        let child = try Child(["run", "--whip", "http://127.0.0.1:9/whip", "--capture", "laterdev", "--playback", "null",
                               "--max-attempts", "1", "--events", "-", "--status-file", dir + "/status.json"],
                              environment: ["HOME": dir], name: "missing-device")
        let wait = child.waitFor { event($0)?["type"] as? String == "audio_wait" }
        #expect((wait.flatMap(event)?["reason"] as? String)?.contains("cannot open capture device 'laterdev'") == true, "\(child.stderr)")
        // The status file no longer claims the dead run's call: it says what this run waits for.
        let status = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/status.json"))) as? [String: Any]
        #expect(status?["state"] as? String == "waiting", "\(String(describing: status))")
        #expect((status?["problem"] as? String)?.contains("waiting for the sound device: capture device 'laterdev': cannot open capture device 'laterdev'") == true, "\(String(describing: status))")
        // The device is defined (as installing a board's asound.conf would).
        try "pcm.laterdev { type null }\n".write(toFile: dir + "/.asoundrc", atomically: true, encoding: .utf8)
        #expect(child.waitFor { event($0)?["type"] as? String == "audio_wait" } != nil, "the wait ended")
        #expect(child.waitFor { isState($0, "connecting") } != nil, "the call started: \(child.stderr)")
        #expect(child.wait(limit: 60) == 69, "max-attempts 1 against a closed port: \(child.stderr)")
    }

    @Test func aStopWhileWaitingExitsCleanly() throws {
        let dir = try home("stop")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let child = try Child(["run", "--whip", "http://127.0.0.1:9/whip", "--capture", "neverdev", "--playback", "null",
                               "--events", "-", "--status-file", dir + "/status.json"],
                              environment: ["HOME": dir], name: "missing-device-stop")
        #expect(child.waitFor { event($0)?["type"] as? String == "audio_wait" } != nil)
        child.signal(SIGTERM)
        #expect(child.wait(limit: 30) == 0, "\(child.stderr)")
        #expect(child.stderr.contains("stopping while waiting for the sound device"))
    }
}

/// A run killed mid-call (SIGKILL, a watchdog abort, a power cut) cannot close its
/// provider session; the provider kept it until its own timeout. The session's close is
/// kept in the state directory while it lives, and the next start sends it.
@Suite(.serialized) struct LeftOpenSessionTests {
    @Test func theNextStartClosesWhatAKilledRunLeftOpen() throws {
        let dir = temporary("left-open-state")
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        chmod(dir, 0o700)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let answerer = try ReadyProcess(Linnet.executable.path, ["answer", "--listen", "127.0.0.1:0", "--mode", "echo"], name: "left-open-answer")
        let whip = "http://127.0.0.1:\(answerer.fields[1])/whip"
        let first = try Child(["run", "--whip", whip, "--capture", "none", "--playback", "none", "--events", "-",
                               "--state-dir", dir, "--status-file", dir + "/status.json"], name: "left-open-first")
        #expect(first.waitFor { isState($0, "connected") } != nil, "\(first.stderr)")
        let kept = (try? String(contentsOfFile: dir + "/open-sessions.jsonl", encoding: .utf8)) ?? ""
        #expect(kept.contains("\"method\":\"DELETE\"") && kept.contains("/whip/s1"), "kept: \(kept)")
        #expect(!kept.contains("Authorization"), "no credential on disk")
        kill(first.process.processIdentifier, SIGKILL)
        _ = first.wait(limit: 10)
        // The next start closes s1 before anything else, then makes its own call.
        let second = try Child(["run", "--whip", whip, "--capture", "none", "--playback", "none", "--events", "-", "--seconds", "1",
                                "--state-dir", dir, "--status-file", dir + "/status.json"], name: "left-open-second")
        #expect(second.wait(limit: 60) == 0, "\(second.stderr)")
        #expect(second.stderr.contains("closing the session a previous run left open: DELETE \(whip)/s1"), "\(second.stderr)")
        #expect(second.stderr.contains("left open: \(whip)/s1 answered 200"), "\(second.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/open-sessions.jsonl"), "nothing open after a clean end")
        answerer.stop()
        let log = (try? String(contentsOfFile: answerer.log, encoding: .utf8)) ?? ""
        #expect(log.contains("session s1 ended"), "\(log)")
    }
}
