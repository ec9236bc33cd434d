import Testing
import Foundation

/// A child process that announces itself with one `READY …` line on stdout (read
/// byte by byte: the test blocks on the line, it never sleeps).
final class ReadyProcess {
    let process = Process()
    let fields: [String]
    let log: String

    init(_ executable: String, _ arguments: [String], name: String) throws {
        log = temporary("\(name).log")
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardInput = Pipe()  // kept open: the relay also reads commands on stdin
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: log)
        try process.run()
        var line = Data()
        let fd = out.fileHandleForReading.fileDescriptor
        while true {
            var byte: UInt8 = 0
            guard read(fd, &byte, 1) == 1 else { throw NSError(domain: "\(name) exited before READY", code: 1) }
            if byte == 10 { break }
            line.append(byte)
        }
        fields = String(decoding: line, as: UTF8.self).split(separator: " ").map(String.init)
        guard fields.first == "READY", fields.count >= 2 else { throw NSError(domain: "\(name) said \(fields)", code: 2) }
    }

    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }

    deinit { stop(); unlink(log) }
}

/// Tests/Interop/relay.py between `linnet run` and `linnet answer`: the relay proxies the
/// WHIP signaling and rewrites both descriptions' candidates, so every datagram goes
/// through it (its counters and the selected path prove it).
final class RelayedAnswerer {
    static let relayScript = InteropPeer.packageRoot + "/Tests/Interop/relay.py"
    let answerer: ReadyProcess
    let relay: ReadyProcess
    var httpPort: String { relay.fields[1] }
    var controlPort: UInt16 { UInt16(relay.fields[2]) ?? 0 }

    init(name: String, commands: [String]) throws {
        answerer = try ReadyProcess(Linnet.executable.path, ["answer", "--listen", "127.0.0.1:0", "--mode", "echo"], name: "\(name)-answer")
        relay = try ReadyProcess("/usr/bin/python3", [RelayedAnswerer.relayScript, "--upstream", "http://127.0.0.1:\(answerer.fields[1])",
                                                      "--control", "127.0.0.1:0", "--seed", "7"] + commands, name: "\(name)-relay")
    }

    /// One command on the control port; the reply line.
    func command(_ text: String) throws -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw NSError(domain: "socket", code: 3) }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = controlPort.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let ok = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard ok == 0 else { throw NSError(domain: "connect to the relay's control port", code: 4) }
        let line = Array((text + "\n").utf8)
        _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        var reply = Data()
        var byte: UInt8 = 0
        while read(fd, &byte, 1) == 1, byte != 10 { reply.append(byte) }
        return String(decoding: reply, as: UTF8.self)
    }

    func stats() throws -> [String: Any] {
        let reply = try command("stats")
        guard reply.hasPrefix("ok ") else { throw NSError(domain: "relay said \(reply)", code: 5) }
        return try JSONSerialization.jsonObject(with: Data(reply.dropFirst(3).utf8)) as? [String: Any] ?? [:]
    }

    func stop() { relay.stop(); answerer.stop() }
}

@Suite(.serialized) struct RelayTests {
    func counters(_ stats: [String: Any], _ direction: String) -> [String: Int] { stats[direction] as? [String: Int] ?? [:] }

    /// 10 % loss each way through the relay: the call connects over the relay's ports,
    /// ≈ 10 % of datagrams are dropped by it, and the echo of Linnet's 440 Hz tone comes
    /// back with concealment filling the gaps (the tone in most 100 ms windows).
    @Test func audioThroughTheRelayAtTenPercentLoss() throws {
        let r = try RelayedAnswerer(name: "relay-loss", commands: ["loss 0.1"])
        defer { r.stop() }
        let input = temporary("relay-in.wav"), output = temporary("relay-out.wav")
        defer { unlink(input); unlink(output) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(440, amplitude: 0.25, seconds: 6, rate: 48_000).map { Int32($0 * 32_767) })
        let run = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(r.httpPort)/whip", "--input", input, "--output", output, "--seconds", "5"])
        #expect(run.status == 0, "\(run.err)")
        let stats = try r.stats()
        let up = counters(stats, "up"), down = counters(stats, "down")
        let ports = stats["ports"] as? [String: Int] ?? [:]
        // Linnet's selected path is the relay's B socket, not the answerer.
        #expect(run.err.contains("→ 127.0.0.1:\(ports["b"] ?? -1)"), "\(run.err)")
        #expect((up["received"] ?? 0) > 200 && (down["received"] ?? 0) > 150)
        let lossUp = Double(up["lost"] ?? 0) / Double(max(1, up["received"] ?? 0))
        #expect(lossUp > 0.05 && lossUp < 0.16, "relay dropped \(lossUp)")
        print("BENCH relay_10pct: up \(up), down \(down)")
        let (_, back) = try WAVFile.read16(output)
        let rms = 0.25 * 32_767 / 2.0.squareRoot()
        let fraction = fractionOfWindowsWithTone(Array(back.dropFirst(24_000)), 440, rate: 48_000, rms: rms, levelDB: 6)
        #expect(fraction > 0.6, "440 Hz in \(Int(fraction * 100)) % of windows")
    }

    /// The relay rebinds its answerer-facing socket 2 s into the call (Linnet's peer
    /// sees the answerer's source port change and its datagrams to the old port vanish):
    /// the call moves to the new port and audio comes back before the end. (On the core,
    /// either side's rebinding: AgentTests' `AgentCoreRestartTests.natRebindingOn…`.)
    @Test func natRebindingThroughTheRelay() throws {
        let r = try RelayedAnswerer(name: "relay-rebind", commands: ["at 2 rebind"])
        defer { r.stop() }
        let input = temporary("relay-rb-in.wav"), output = temporary("relay-rb-out.wav")
        defer { unlink(input); unlink(output) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(440, amplitude: 0.25, seconds: 15, rate: 48_000).map { Int32($0 * 32_767) })
        let run = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(r.httpPort)/whip", "--input", input, "--output", output, "--seconds", "14"])
        #expect(run.status == 0, "\(run.err)")
        let stats = try r.stats()
        let ports = stats["ports"] as? [String: Int] ?? [:]
        #expect(stats["rebinds"] as? Int == 1)
        // The path moved to the new B port.
        #expect(run.err.contains("→ 127.0.0.1:\(ports["b"] ?? -1)"), "\(run.err)")
        let (_, back) = try WAVFile.read16(output)
        // The last 2 s (before the hang-up) hold the echo again.
        let tail = Array(back.suffix(48_000 * 2).dropLast(4_800))
        let rms = 0.25 * 32_767 / 2.0.squareRoot()
        let fraction = fractionOfWindowsWithTone(tail, 440, rate: 48_000, rms: rms, levelDB: 6)
        print("BENCH relay_rebind: \(run.err.split(separator: "\n").filter { $0.contains("path") || $0.contains("ICE") }), tail tone \(Int(fraction * 100)) %")
        #expect(fraction > 0.7, "440 Hz in \(Int(fraction * 100)) % of the last windows")
    }

    /// A 5 s black hole (shorter than consent expiry) 2 s into the call: the agent goes
    /// disconnected, restarts ICE through WHIP (PATCH, the answerer gave an ETag) and is
    /// connected again on the same session once the hole closes; the echo is heard again
    /// before the end. The timing (disconnected within 3 s of the hole, connected within
    /// a second of its end) is asserted on the simulated clock by AgentTests'
    /// `AgentCoreRestartTests.shortBlackholeIsRiddenOutByAnICERestart`.
    @Test func shortBlackholeIsRiddenOut() throws {
        let r = try RelayedAnswerer(name: "relay-hole", commands: ["at 2 blackhole 5"])
        defer { r.stop() }
        let input = temporary("relay-bh-in.wav"), output = temporary("relay-bh-out.wav"), events = temporary("relay-bh.jsonl")
        defer { unlink(input); unlink(output); unlink(events) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(440, amplitude: 0.25, seconds: 13, rate: 48_000).map { Int32($0 * 32_767) })
        let run = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(r.httpPort)/whip", "--input", input, "--output", output,
                                  "--seconds", "12", "--events", events])
        #expect(run.status == 0, "\(run.err)")
        let stats = try r.stats()
        let up = counters(stats, "up"), down = counters(stats, "down")
        #expect((up["blackholed"] ?? 0) > 150 && (down["blackholed"] ?? 0) > 0)
        let lines = try String(contentsOfFile: events, encoding: .utf8).split(separator: "\n").compactMap { event(String($0)) }
        let states = lines.filter { $0["type"] as? String == "state" }.compactMap { $0["state"] as? String }
        #expect(states == ["connecting", "connected", "disconnected", "connected", "closed"], "\(states)")
        #expect(lines.contains { $0["type"] as? String == "ice_restart" })
        #expect(lines.filter { $0["type"] as? String == "session" }.count == 1, "recovered on the same session")
        let ice = states
        let (_, back) = try WAVFile.read16(output)
        let tail = Array(back.suffix(48_000 * 2).dropLast(4_800))
        let rms = 0.25 * 32_767 / 2.0.squareRoot()
        let fraction = fractionOfWindowsWithTone(tail, 440, rate: 48_000, rms: rms, levelDB: 6)
        print("BENCH relay_blackhole_5s: \(ice), up \(up), tail tone \(Int(fraction * 100)) %")
        #expect(fraction > 0.7, "440 Hz in \(Int(fraction * 100)) % of the last windows")
    }
}
