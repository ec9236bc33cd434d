import Testing
import Foundation
import Glibc

/// Streams that never run dry: a provider's TCP passive candidate
/// that sends empty RFC 4571 frames without end, and a TURN server over TCP that sends
/// empty ChannelData without end. Reading such a socket until EAGAIN never returns; the
/// loop must stay fair (ReadBudget): timers fire (stats lines every second), audio
/// flows, and SIGTERM ends the run cleanly. The bounds only end a hung test.
@Suite(.serialized) struct HostileFloodTests {
    func answerer(_ name: String) throws -> ReadyProcess {
        try ReadyProcess(Linnet.executable.path, ["answer", "--listen", "127.0.0.1:0", "--mode", "echo"], name: name)
    }

    /// Kills the child if the test is still waiting after `seconds` (a hang: the
    /// failure this guards against); the waits then see the end of its output.
    func bound(_ child: Child, _ seconds: Double) {
        let pid = child.process.processIdentifier
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { kill(pid, SIGKILL) }
    }

    func stats(_ line: String) -> [String: Any]? {
        guard let e = event(line), e["type"] as? String == "stats" else { return nil }
        return e
    }

    func floodSent(_ server: HostileServer) -> Int {
        server.requests().filter { $0["listener"] as? String == "flood" }.compactMap { $0["sent"] as? Int }.reduce(0, +)
    }

    @Test func aTCPCandidateThatFloodsDoesNotStarveTheLoop() throws {
        let upstream = try answerer("flood-tcp-answer")
        defer { upstream.stop() }
        let server = try HostileServer("tcp-flood", upstream: Int(upstream.fields[1])!, name: "flood-tcp")
        let child = try Child(["run", "--whip", "http://127.0.0.1:\(server.home)/whip", "--capture", "none", "--playback", "none",
                               "--events", "-", "--stats-seconds", "1", "--status-file", temporary("flood-tcp-status.json")],
                              name: "flood-tcp")
        bound(child, 60)
        // The session connects over the flooding connection only: it stays connecting,
        // but the loop turns: three stats lines, a second apart.
        for _ in 0..<3 { #expect(child.waitFor { stats($0) != nil } != nil, "the loop stopped turning") }
        child.signal(SIGTERM)
        #expect(child.wait(limit: 30) == 0, "\(child.stderr)")
        let sent = floodSent(server)
        #expect(sent > 1 << 20, "the candidate flooded \(sent) bytes")
    }

    @Test func aTURNServerThatFloodsDoesNotStopTheCall() throws {
        let upstream = try answerer("flood-turn-answer")
        defer { upstream.stop() }
        let server = try HostileServer("turn-flood", upstream: Int(upstream.fields[1])!, name: "flood-turn")
        let turn = Int(server.process.fields[3])!
        let input = temporary("flood-turn-in.wav")
        defer { unlink(input) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(300, amplitude: 0.2, seconds: 2, rate: 48_000).map { Int32($0 * 32_767) })
        let child = try Child(["run", "--whip", "http://127.0.0.1:\(server.home)/whip", "--input", input, "--loop-input", "--playback", "none",
                               "--ice-server", "turn:127.0.0.1:\(turn)?transport=tcp", "--ice-username", "u", "--ice-credential", "p",
                               "--events", "-", "--stats-seconds", "1", "--status-file", temporary("flood-turn-status.json")],
                              name: "flood-turn")
        bound(child, 60)
        #expect(child.waitFor { isState($0, "connected") } != nil, "\(child.stderr)")
        // Audio goes both ways while the TURN connection floods: the echo keeps coming.
        var received: [Int] = []
        for _ in 0..<4 {
            if let s = child.waitFor({ stats($0) != nil }).flatMap(stats) { received.append(s["packets_received"] as? Int ?? 0) }
        }
        #expect(received.count == 4 && received.last! - received.first! >= 100, "packets received per stats line: \(received)")
        child.signal(SIGTERM)
        #expect(child.wait(limit: 30) == 0, "\(child.stderr)")
        let sent = floodSent(server)
        #expect(sent > 1 << 20, "the TURN server flooded \(sent) bytes")
    }
}
