import Testing
import Foundation

/// The independent peer (aiortc, Tests/Interop/peer.py) as a subprocess. It prints
/// `READY <port>` once listening; the test blocks reading that line (no sleeping).
final class InteropPeer {
    static var python: String? {
        if let p = ProcessInfo.processInfo.environment["AIORTC_PYTHON"], FileManager.default.isExecutableFile(atPath: p) { return p }
        let venv = packageRoot + "/build/interop-venv/bin/python"
        return FileManager.default.isExecutableFile(atPath: venv) ? venv : nil
    }
    static var packageRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    /// The interpreter, or nil to skip; on CI a missing peer is a failure, not a skip.
    static func require() -> String? {
        if let p = python { return p }
        if ProcessInfo.processInfo.environment["CI"] != nil {
            Issue.record("the aiortc interop peer is not installed (run Tests/Interop/setup.sh or set AIORTC_PYTHON)")
        }
        return nil
    }

    let process = Process()
    let port: Int
    let report: String
    let record: String

    init(python: String, mode: String, extra: [String] = [], name: String) throws {
        report = temporary("\(name)-report.json")
        record = temporary("\(name)-peer.wav")
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = ["-u", InteropPeer.packageRoot + "/Tests/Interop/peer.py", "--listen", "127.0.0.1:0", "--mode", mode,
                             "--report", report, "--record", record] + extra
        let out = Pipe()
        process.standardOutput = out
        _ = FileManager.default.createFile(atPath: temporary("\(name)-peer.log"), contents: nil)
        process.standardError = FileHandle(forWritingAtPath: temporary("\(name)-peer.log"))
        try process.run()
        var line = Data()
        let fd = out.fileHandleForReading.fileDescriptor
        while true {
            var byte: UInt8 = 0
            let n = read(fd, &byte, 1)
            if n <= 0 { throw NSError(domain: "peer.py exited before READY", code: 1) }
            if byte == 10 { break }
            line.append(byte)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("READY "), let p = Int(text.dropFirst(6)) else { throw NSError(domain: "peer.py said: \(text)", code: 2) }
        port = p
    }

    /// Stops the peer (SIGTERM: it writes its report and its recording, then exits) and
    /// returns the report.
    func stop() throws -> [String: Any] {
        process.terminate()
        process.waitUntilExit()
        let data = try Data(contentsOf: URL(fileURLWithPath: report))
        return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
    }

    deinit {
        if process.isRunning { process.terminate(); process.waitUntilExit() }
        unlink(report)
        unlink(record)
    }
}

/// The part of `x` from the first to the last 100 ms window in which `f` dominates:
/// the echo as it came back, without the silence before the call connected (a loaded
/// machine connects later, and the output file starts at once) or after it closed.
/// Judging that span keeps every gap inside the call in the judgement.
func toneSpan(_ x: [Int16], _ f: Double, rate: Int) -> [Int16] {
    let windows = toneWindows(x, f, rate: rate, rms: 1, levelDB: .infinity)
    guard let first = windows.firstIndex(where: { $0 != .none }),
          let last = windows.lastIndex(where: { $0 != .none }) else { return [] }
    let w = rate / 10
    return Array(x[(first * w)..<((last + 1) * w)])
}

/// Linnet's `--output` of a timed call, judged over the echo's span (`toneSpan`) after
/// its first `skip` samples: the fraction of windows with `f` at `rms` (within
/// `levelDB`), how long that judged stretch lasted, and the window map of the whole file
/// for a failure message.
func judgeOutput(_ x: [Int16], _ f: Double, rms: Double, levelDB: Double, skip: Int = 24_000) -> (fraction: Double, seconds: Double, map: String) {
    let span = Array(toneSpan(x, f, rate: 48_000).dropFirst(skip))
    return (fractionOfWindowsWithTone(span, f, rate: 48_000, rms: rms, levelDB: levelDB), Double(span.count) / 48_000,
            toneWindowMap(x, f, rate: 48_000, rms: rms, levelDB: levelDB))
}

/// What one 100 ms window holds: `f` dominating (≥ 20 dB over ±30 % of f) at a level
/// within `levelDB` of `rms`, `f` dominating at another level, or no tone.
enum ToneWindow { case atLevel, offLevel, none }

/// `x` cut into whole 100 ms windows, each classified.
func toneWindows(_ x: [Int16], _ f: Double, rate: Int, rms: Double, levelDB: Double) -> [ToneWindow] {
    let w = rate / 10
    return stride(from: 0, to: x.count - w + 1, by: w).map { i in
        let window = x[i..<(i + w)]
        let others = max(Signal.power(window, f * 0.7, rate: rate), Signal.power(window, f * 1.3, rate: rate))
        guard Signal.power(window, f, rate: rate) > 100 * others else { return .none }
        return abs(20 * log10(max(Signal.rms(window), 1) / rms)) <= levelDB ? .atLevel : .offLevel
    }
}

/// 100 ms windows of `x` in which `f` dominates at a level within `levelDB` of `rms`.
func fractionOfWindowsWithTone(_ x: [Int16], _ f: Double, rate: Int, rms: Double, levelDB: Double = 3) -> Double {
    let windows = toneWindows(x, f, rate: rate, rms: rms, levelDB: levelDB)
    return windows.isEmpty ? 0 : Double(windows.filter { $0 == .atLevel }.count) / Double(windows.count)
}

/// The same judgement window by window, for a failure message: `+` the tone at level,
/// `~` the tone off level, `.` no tone; so a stall (a run of `.`) reads apart from
/// concealment (`~`) or a level that is wrong throughout.
func toneWindowMap(_ x: [Int16], _ f: Double, rate: Int, rms: Double, levelDB: Double = 3) -> String {
    String(toneWindows(x, f, rate: rate, rms: rms, levelDB: levelDB).map { w -> Character in
        switch w {
        case .atLevel: return "+"
        case .offLevel: return "~"
        case .none: return "."
        }
    })
}

@Suite(.serialized) struct InteropTests {
    /// WHIP against aiortc in echo mode: Linnet sends a 440 Hz tone; aiortc's own decoder
    /// records it (what Linnet sent is decodable by an independent stack), echoes it, and
    /// Linnet's --output holds 440 Hz at the sent level for most of the call.
    @Test func whipEchoWithAiortc() throws {
        guard let python = InteropPeer.require() else { return }
        let peer = try InteropPeer(python: python, mode: "echo", name: "whip-echo")
        let input = temporary("interop-in.wav"), output = temporary("interop-out.wav"), events = temporary("interop-ev.jsonl")
        defer { unlink(input); unlink(output); unlink(events) }
        let amplitude = 0.25
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(440, amplitude: amplitude, seconds: 6, rate: 48_000).map { Int32($0 * 32_767) })
        let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(peer.port)/whip", "--input", input, "--output", output,
                                "--seconds", "5", "--events", events])
        #expect(r.status == 0, "\(r.err)")
        let report = try peer.stop()
        let call = (report["sessions"] as? [[String: Any]])?.first ?? [:]
        #expect(call["connection_state"] as? String == "closed" || (call["states"] as? [Any])?.isEmpty == false)
        #expect(call["dtls_role"] as? String == "client")  // aiortc answers active: Linnet is the DTLS server
        #expect(call["srtp_profile"] as? String == "SRTP_AES128_CM_SHA1_80")
        #expect((call["rtp_packets_received"] as? Int ?? 0) > 200)
        let expectedRMS = amplitude * 32_767 / 2.0.squareRoot()
        // What aiortc's own decoder made of Linnet's stream: the tone at the level sent.
        let (_, heard) = try WAVFile.read16(peer.record)
        let heardFraction = fractionOfWindowsWithTone(Array(heard.dropFirst(24_000)), 440, rate: 48_000, rms: expectedRMS, levelDB: 1)
        #expect(heardFraction > 0.8, "aiortc heard 440 Hz at level in \(Int(heardFraction * 100)) % of windows")
        // What came back. aiortc turns the decoded mono into stereo before its (stereo)
        // Opus encoder with libswresample's default -3.01 dB centre mix, so the echo is
        // 3.01 dB quieter than what was sent (measured: 4099 vs 5792 RMS).
        let (_, back) = try WAVFile.read16(output)
        let echoRMS = expectedRMS / 2.0.squareRoot()
        let (fraction, seconds, map) = judgeOutput(back, 440, rms: echoRMS, levelDB: 1)
        #expect(seconds >= 3, "the echo lasted \(seconds) s: \(map)")
        #expect(fraction > 0.8, "440 Hz at level in \(Int(fraction * 100)) % of windows: \(map)")
        // The provider-side close went out (DELETE on the WHIP resource).
        let http = report["http"] as? [[String: Any]] ?? []
        #expect(http.contains { ($0["method"] as? String) == "DELETE" && ($0["status"] as? Int) == 200 })
    }

    /// Tone mode: the provider's 440 Hz voice (-12 dBFS peak) arrives.
    @Test func toneFromAiortc() throws {
        guard let python = InteropPeer.require() else { return }
        let peer = try InteropPeer(python: python, mode: "tone", name: "tone")
        let output = temporary("interop-tone.wav")
        defer { unlink(output) }
        let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(peer.port)/whip", "--output", output, "--seconds", "4", "--capture", "none"])
        #expect(r.status == 0, "\(r.err)")
        _ = try peer.stop()
        let (_, back) = try WAVFile.read16(output)
        // -12 dBFS peak, less aiortc's -3.01 dB mono-to-stereo centre mix (see above).
        let rms = pow(10, -12.0 / 20) * 32_767 / 2.0.squareRoot() / 2.0.squareRoot()
        let (fraction, seconds, map) = judgeOutput(back, 440, rms: rms, levelDB: 1)
        #expect(seconds >= 3, "the tone lasted \(seconds) s of the 4 s call: \(map)")
        #expect(fraction > 0.8, "440 Hz at level in \(Int(fraction * 100)) % of windows: \(map)")
    }

    /// The backend route with data channels: Linnet opens `oai-events` and sends a small
    /// and a multi-packet message, which aiortc echoes; aiortc opens `peer-events`,
    /// sends a hello and a 60 KB text, then closes its channel. All of it shows up in
    /// Linnet's --events, intact; the close route is called at the end.
    @Test func backendRouteAndDataChannels() throws {
        guard let python = InteropPeer.require() else { return }
        let peer = try InteropPeer(python: python, mode: "echo", extra: ["--close-channel-after", "2", "--big-message-size", "60000"], name: "backend")
        let events = temporary("interop-dc.jsonl"), send = temporary("interop-send.txt")
        defer { unlink(events); unlink(send) }
        let big = String(repeating: "0123456789", count: 5_000)
        try ("{\"type\":\"ping\"}\n" + big + "\n").write(toFile: send, atomically: true, encoding: .utf8)
        let r = try Linnet.run(["run", "--backend", "http://127.0.0.1:\(peer.port)", "--chat", "chat42", "--send", send, "--capture", "none", "--playback", "none",
                                "--events", events, "--seconds", "4"])
        #expect(r.status == 0, "\(r.err)")
        let report = try peer.stop()
        let lines = try String(contentsOfFile: events, encoding: .utf8).split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let messages = lines.filter { $0["type"] as? String == "message" }
        let onEvents = messages.filter { $0["label"] as? String == "oai-events" }.compactMap { $0["text"] as? String }
        // The agent's own session.update (sent on every events channel) comes back too.
        #expect(onEvents.filter { !$0.contains("\"session.update\"") } == ["{\"type\":\"ping\"}", big], "echoes: \(onEvents.map { $0.count })")
        let fromPeer = messages.filter { $0["label"] as? String == "peer-events" }.compactMap { $0["text"] as? String }
        #expect(fromPeer.first.map { $0.contains("hello") } == true)
        #expect(fromPeer.contains { $0.utf8.count == 60_000 })
        #expect(lines.contains { $0["type"] as? String == "channel" && $0["event"] as? String == "closed" })
        let http = report["http"] as? [[String: Any]] ?? []
        #expect(http.contains { ($0["path"] as? String)?.hasSuffix("/close") == true && ($0["status"] as? Int) == 200 })
        let call = (report["sessions"] as? [[String: Any]])?.first ?? [:]
        #expect((call["data_channel_labels"] as? [String])?.contains("oai-events") == true)
    }

    /// Errors from the provider are clear and end with the right status: 500 with an
    /// HTML page, a 201 whose body is not SDP.
    @Test func providerErrors() throws {
        guard let python = InteropPeer.require() else { return }
        let failing = try InteropPeer(python: python, mode: "echo", extra: ["--fail-status", "500"], name: "fail")
        let a = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(failing.port)/whip", "--seconds", "1", "--max-attempts", "1", "--capture", "none", "--playback", "none"])
        #expect(a.status == 69 && a.err.contains("WHIP endpoint answered 500"), "\(a.err)")
        _ = try failing.stop()
        let garbage = try InteropPeer(python: python, mode: "echo", extra: ["--garbage"], name: "garbage")
        let b = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(garbage.port)/whip", "--seconds", "1", "--max-attempts", "1", "--capture", "none", "--playback", "none"])
        #expect(b.status == 65 && b.err.contains("answer is unusable"), "\(b.err)")
        _ = try garbage.stop()
    }
}
