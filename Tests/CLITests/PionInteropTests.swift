import Testing
import Foundation

/// The pion test peer (Tests/Interop/pion, pion/webrtc 3.1.56 from Debian): found as
/// `PION_PEER`, else built (or found up to date) by Tests/Interop/pion/build.sh. Missing
/// is a skip, except on CI, where it is a failure (as for the aiortc peer).
enum PionPeer {
    static let located: String? = {
        let env = ProcessInfo.processInfo.environment
        if let p = env["PION_PEER"], FileManager.default.isExecutableFile(atPath: p) { return p }
        let script = InteropPeer.packageRoot + "/Tests/Interop/pion/build.sh"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = [script]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return nil }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0,
              let last = String(decoding: data, as: UTF8.self).split(separator: "\n").last.map(String.init),
              FileManager.default.isExecutableFile(atPath: last) else { return nil }
        return last
    }()

    /// opusenc/opusdec (Debian opus-tools): the peer sends and records Ogg/Opus.
    static func tool(_ name: String) -> String? {
        for dir in ["/usr/bin", "/usr/local/bin"] where FileManager.default.isExecutableFile(atPath: "\(dir)/\(name)") {
            return "\(dir)/\(name)"
        }
        return nil
    }

    /// The peer's path, or nil to skip; on CI a missing peer or tool is a failure.
    static func require() -> String? {
        if let p = located, tool("opusenc") != nil, tool("opusdec") != nil { return p }
        if ProcessInfo.processInfo.environment["CI"] != nil {
            Issue.record("the pion interop peer or opus-tools is missing (run Tests/Interop/pion/build.sh as root, or set PION_PEER)")
        }
        return nil
    }

    /// Runs a tool to completion; its stderr on failure.
    static func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, err: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: e, as: UTF8.self))
    }

    /// A WAV made into Ogg/Opus the way the peer can send it: 32 kbit/s, one packet per
    /// page (pion's oggreader does not split pages).
    static func encode(_ wav: String, _ ogg: String) throws {
        let r = try run(tool("opusenc")!, ["--quiet", "--bitrate", "32", "--max-delay", "20", wav, ogg])
        #expect(r.status == 0, "opusenc: \(r.err)")
    }

    /// An Ogg/Opus recording decoded by an independent decoder (opusdec) to 48 kHz WAV.
    static func decode(_ ogg: String) throws -> [Int16] {
        let wav = ogg + ".wav"
        defer { unlink(wav) }
        let r = try run(tool("opusdec")!, ["--quiet", "--rate", "48000", ogg, wav])
        guard r.status == 0 else {
            Issue.record("opusdec \(ogg): \(r.err)")
            return []
        }
        return try WAVFile.read16(wav).samples
    }
}

/// `pionpeer answer` as a child: READY, then ANSWERED and DTLS lines on stdout.
final class PionAnswerer {
    let process: LineProcess
    let port: Int
    let report: String, record: String, log: String

    init(binary: String, _ extra: [String], name: String) throws {
        report = temporary("pion-\(name)-report.json")
        record = temporary("pion-\(name)-peer.ogg")
        log = temporary("pion-\(name).log")
        process = try LineProcess(binary, ["answer", "--listen", "127.0.0.1:0", "--report", report, "--record", record] + extra, stderr: log)
        guard let ready = process.waitFor({ $0.hasPrefix("READY ") }), let p = Int(ready.dropFirst(6)) else {
            throw NSError(domain: "pionpeer answer did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")", code: 1)
        }
        port = p
    }

    /// SIGTERM: the peer ends its calls, closes the recording and rewrites the report.
    func stop() throws -> [String: Any] {
        process.signal(SIGTERM)
        process.process.waitUntilExit()
        #expect(process.process.terminationStatus == 0, "pionpeer exit status \(process.process.terminationStatus)")
        let data = try Data(contentsOf: URL(fileURLWithPath: report))
        return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
    }

    var logText: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    deinit {
        process.stop()
        unlink(report)
        unlink(record)
        unlink(log)
    }
}

/// The tone every test sends: 440 Hz, amplitude 0.25 (-12 dBFS peak), its RMS.
private let toneAmplitude = 0.25
private let toneRMS = toneAmplitude * 32_767 / 2.0.squareRoot()

private func writeTone(_ path: String, seconds: Double) throws {
    try WAVFile.write(path, rate: 48_000, channels: 1, bits: 16,
                      samples: Signal.tone(440, amplitude: toneAmplitude, seconds: seconds, rate: 48_000).map { Int32($0 * 32_767) })
}

/// The level of `x` (after its first half second) relative to the tone sent, in dB.
private func levelDB(_ x: [Int16]) -> Double {
    20 * log10(max(Signal.rms(x.dropFirst(24_000)[...]), 1) / toneRMS)
}

private func text(_ d: Double) -> String { String(format: "%.2f", d) }

@Suite(.serialized) struct PionInteropTests {
    /// Linnet offers (actpass) and pion answers; audio and data channels both ways.
    /// Returns pion's call report and Linnet's events.
    func linnetOffers(_ pion: String, route: String, pionArgs: [String], name: String)
        throws -> (call: [String: Any], report: [String: Any], events: [[String: Any]])
    {
        let peer = try PionAnswerer(binary: pion, ["--mode", "echo"] + pionArgs, name: name)
        let input = temporary("\(name)-in.wav"), output = temporary("\(name)-out.wav")
        let events = temporary("\(name)-ev.jsonl"), send = temporary("\(name)-send.txt")
        defer { unlink(input); unlink(output); unlink(events); unlink(send) }
        try writeTone(input, seconds: 6)
        // A small message and one of 5,000 bytes (several SCTP packets each way).
        let big = "{\"type\":\"big\",\"data\":\"" + String(repeating: "0123456789", count: 497) + "\"}"
        try ("{\"type\":\"ping\"}\n" + big + "\n").write(toFile: send, atomically: true, encoding: .utf8)
        let signaling = route == "whip" ? ["--whip", "http://127.0.0.1:\(peer.port)/whip"]
                                        : ["--backend", "http://127.0.0.1:\(peer.port)", "--chat", "chat7"]
        let r = try Linnet.run(["run"] + signaling + ["--input", input, "--output", output, "--seconds", "5",
                                                      "--events", events, "--send", send, "--max-attempts", "1"])
        #expect(r.status == 0, "\(r.err)")
        let report = try peer.stop()  // the recording is complete once the peer has exited
        let heardByPion = try PionPeer.decode(peer.record)
        let call = (report["sessions"] as? [[String: Any]])?.first ?? [:]
        #expect(call["route"] as? String == route)
        #expect(call["ever_connected"] as? Bool == true, "pion log: \(peer.logText.suffix(600))")
        #expect(call["srtp_profile"] as? String == "SRTP_AES128_CM_SHA1_80")
        #expect(call["remote_certificate"] as? String == "ECDSA P-256")
        #expect((call["rtp_packets_received"] as? Int ?? 0) > 200)
        #expect((call["rtp_packets_sent"] as? Int ?? 0) > 200)
        #expect(call["record_skipped_packets"] as? Int == 0)
        // What pion received, decoded by opusdec: the tone at the level sent.
        let pionFraction = fractionOfWindowsWithTone(Array(heardByPion.dropFirst(24_000)), 440, rate: 48_000, rms: toneRMS, levelDB: 1)
        #expect(pionFraction > 0.8, "pion heard 440 Hz at level in \(Int(pionFraction * 100)) % of windows: \(toneWindowMap(Array(heardByPion.dropFirst(24_000)), 440, rate: 48_000, rms: toneRMS, levelDB: 1))")
        // What came back: pion echoes the packets themselves, so Linnet's decoder gives the
        // tone at the level sent.
        // Judged over the echo's span (the call connected, to the call closed), after
        // its first half second: at least 4 s of the 5 s call, nearly all of it the
        // tone at the level sent.
        let (_, back) = try WAVFile.read16(output)
        let echo = Array(toneSpan(back, 440, rate: 48_000).dropFirst(24_000))
        let fraction = fractionOfWindowsWithTone(echo, 440, rate: 48_000, rms: toneRMS, levelDB: 1)
        #expect(echo.count >= 4 * 48_000, "the echo lasted \(echo.count / 480) cs of the 5 s call: \(toneWindowMap(back, 440, rate: 48_000, rms: toneRMS, levelDB: 1))")
        #expect(fraction > 0.8, "440 Hz at level in \(Int(fraction * 100)) % of windows: \(toneWindowMap(back, 440, rate: 48_000, rms: toneRMS, levelDB: 1)); Linnet's log: \(r.err.suffix(800))")
        print("PION \(name): answer a=setup:\(call["answer_setup"] ?? "?"), pion DTLS \(call["dtls_role"] ?? "?"); "
            + "Linnet heard the echo in \(Int(fraction * 100)) % of windows at \(text(levelDB(back))) dB, "
            + "pion's recording in \(Int(pionFraction * 100)) % at \(text(levelDB(heardByPion))) dB")
        // Data channels: Linnet's messages came back on its channel, intact and in order;
        // pion's hello arrived on peer-events.
        let lines = try String(contentsOfFile: events, encoding: .utf8).split(separator: "\n").compactMap { event(String($0)) }
        let messages = lines.filter { $0["type"] as? String == "message" }
        let echoed = messages.filter { $0["label"] as? String == "oai-events" }.compactMap { $0["text"] as? String }
            .filter { !$0.contains("\"session.update\"") }
        #expect(echoed == ["{\"type\":\"ping\"}", big], "echoes: \(echoed.map { $0.count })")
        let hello = messages.filter { $0["label"] as? String == "peer-events" }.compactMap { $0["text"] as? String }
        #expect(hello.first.map { $0.contains("\"hello\"") && $0.contains("\"pion\"") } == true, "\(hello)")
        let channels = call["data_channels"] as? [[String: Any]] ?? []
        let linnetChannel = channels.first { $0["label"] as? String == "oai-events" }
        #expect(linnetChannel?["opened_by"] as? String == "remote")
        // Voice mode with nothing configured sends no session.update (the provider's
        // own settings survive), so only ping and the big one.
        #expect((linnetChannel?["received_count"] as? Int ?? 0) >= 2, "ping and the big one")
        // The provider-side close.
        let http = report["http"] as? [[String: Any]] ?? []
        let closePath = route == "whip" ? "/whip/" : "/close"
        #expect(http.contains { ($0["path"] as? String)?.contains(closePath) == true && ($0["status"] as? Int) == 200 }, "\(http)")
        return (call, report, lines)
    }

    /// Linnet's stream id for its own channel (from its events).
    func linnetStreamID(_ events: [[String: Any]]) -> Int? {
        events.first { $0["type"] as? String == "channel" && $0["event"] as? String == "open" && $0["label"] as? String == "oai-events" }?["id"] as? Int
    }

    /// WHIP: pion answers actpass with active, so Linnet is the DTLS server (its channel
    /// on an odd stream, pion's on an even one).
    @Test func linnetOffersOverWHIPAsDTLSServer() throws {
        guard let pion = PionPeer.require() else { return }
        let (call, _, events) = try linnetOffers(pion, route: "whip", pionArgs: [], name: "pion-whip")
        #expect(call["offer_setup"] as? String == "actpass")
        #expect(call["answer_setup"] as? String == "active")
        #expect(call["dtls_role"] as? String == "client")
        #expect(call["dtls_role_connected"] as? String == "client")
        #expect(call["dtls_role_by_stream_id"] as? String == "client")
        #expect(linnetStreamID(events).map { $0 % 2 == 1 } == true, "Linnet (server) opens odd streams")
    }

    /// The backend route, same roles.
    @Test func linnetOffersOverTheBackendRouteAsDTLSServer() throws {
        guard let pion = PionPeer.require() else { return }
        let (call, report, _) = try linnetOffers(pion, route: "backend", pionArgs: [], name: "pion-backend")
        #expect(call["chat_id"] as? String == "chat7")
        #expect(call["answer_setup"] as? String == "active")
        #expect(call["dtls_role"] as? String == "client")
        let http = report["http"] as? [[String: Any]] ?? []
        #expect(http.contains { ($0["path"] as? String) == "/voice/chat7" && ($0["status"] as? Int) == 200 })
    }

    /// Linnet offering and the DTLS client: pion set to answer passive
    /// (SettingEngine.SetAnsweringDTLSRole(server), `--answer-setup passive`). Rewriting
    /// the offer to `active` does not do it: pion 3.1.56 answers active to that too (see
    /// the matrix below).
    @Test func linnetOffersAsDTLSClient() throws {
        guard let pion = PionPeer.require() else { return }
        let (call, _, events) = try linnetOffers(pion, route: "whip", pionArgs: ["--answer-setup", "passive"], name: "pion-passive")
        #expect(call["answer_setup"] as? String == "passive")
        #expect(call["dtls_role"] as? String == "server")
        #expect(call["dtls_role_connected"] as? String == "server")
        #expect(call["dtls_role_by_stream_id"] as? String == "server")
        #expect(linnetStreamID(events).map { $0 % 2 == 0 } == true, "Linnet (client) opens even streams")
    }

    /// pion offers to `linnet answer --mode echo` as a WHIP client, with its offer's
    /// a=setup as pion makes it (actpass) or rewritten: Linnet answers actpass and passive
    /// with active (Linnet the DTLS client) and active with passive (Linnet the server).
    /// pion sends an opusenc'd tone and records the echo; opusdec gives the tone back at
    /// its level. pion's own probes on `pion-events` (one of 4,000 bytes) come back intact.
    @Test(arguments: [("keep", "active", "server"), ("active", "passive", "client"), ("passive", "active", "server")])
    func pionOffersToLinnetAnswer(setup: String, linnetAnswers: String, pionRole: String) throws {
        guard let pion = PionPeer.require() else { return }
        let name = "pion-offer-\(setup)"
        let answerer = try LineProcess(Linnet.executable.path, ["answer", "--listen", "127.0.0.1:0", "--mode", "echo"], stderr: temporary("\(name)-linnet.log"))
        defer { answerer.stop(); unlink(temporary("\(name)-linnet.log")) }
        guard let ready = answerer.waitFor({ $0.hasPrefix("READY ") }), let port = Int(ready.dropFirst(6)) else {
            Issue.record("linnet answer did not start")
            return
        }
        let wav = temporary("\(name).wav"), ogg = temporary("\(name).opus"), record = temporary("\(name)-rec.ogg")
        let reportPath = temporary("\(name)-report.json"), log = temporary("\(name).log")
        defer { for f in [wav, ogg, record, reportPath, log] { unlink(f) } }
        try writeTone(wav, seconds: 6)
        try PionPeer.encode(wav, ogg)
        let r = try PionPeer.run(pion, ["offer", "--url", "http://127.0.0.1:\(port)/whip", "--setup", setup, "--ogg", ogg,
                                        "--record", record, "--seconds", "4", "--report", reportPath])
        #expect(r.status == 0, "pionpeer offer: \(r.err.suffix(800))")
        let report = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: reportPath))) as? [String: Any] ?? [:]
        #expect(report["ok"] as? Bool == true, "\(report["failures"] ?? "")")
        let call = (report["sessions"] as? [[String: Any]])?.first ?? [:]
        #expect(call["offer_setup"] as? String == "actpass", "pion's own offer")
        #expect(call["offer_setup_applied"] as? String == (setup == "keep" ? "actpass" : setup))
        #expect(call["answer_setup"] as? String == linnetAnswers)
        #expect(call["dtls_role"] as? String == pionRole)
        #expect(call["dtls_role_connected"] as? String == pionRole)
        #expect(call["dtls_role_by_stream_id"] as? String == pionRole)
        #expect(call["srtp_profile"] as? String == "SRTP_AES128_CM_SHA1_80")
        #expect((call["rtp_packets_received"] as? Int ?? 0) > 150)
        let echoes = call["echoes"] as? [String: Any] ?? [:]
        #expect(echoes["matched"] as? Int == 5 && echoes["complete"] as? Bool == true, "\(echoes)")
        #expect((echoes["mismatched"] as? [Any])?.isEmpty == true)
        let sent = (echoes["sent"] as? [[String: Any]] ?? []).compactMap { $0["size"] as? Int }
        #expect(sent.contains { $0 > 1200 }, "one probe larger than an SCTP packet: \(sent)")
        // The echo as pion recorded it: Linnet returns the packets, opusdec decodes them.
        let heard = try PionPeer.decode(record)
        let fraction = fractionOfWindowsWithTone(Array(heard.dropFirst(24_000)), 440, rate: 48_000, rms: toneRMS, levelDB: 1)
        #expect(fraction > 0.8, "440 Hz at level in \(Int(fraction * 100)) % of windows: \(toneWindowMap(Array(heard.dropFirst(24_000)), 440, rate: 48_000, rms: toneRMS, levelDB: 1))")
        print("PION offer --setup \(setup): Linnet answered a=setup:\(call["answer_setup"] ?? "?"), pion DTLS \(call["dtls_role"] ?? "?"); "
            + "pion's recording of the echo in \(Int(fraction * 100)) % of windows at \(text(levelDB(heard))) dB; "
            + "echoes \(echoes["matched"] ?? 0)/\(sent.count)")
    }

    /// What pion answers to each a=setup (Linnet's actpass offer, rewritten by the peer
    /// before pion sees it), and the DTLS role pion then takes (its handshake's own
    /// trace). Measured with pion 3.1.56: actpass → active (client); passive → active
    /// (client); active → active, yet pion runs its handshake as the server: its answer
    /// contradicts its role, both ends wait as servers and the call never connects.
    /// With --answer-setup passive, actpass → passive (server). Hence: offer actpass.
    @Test func pionAnswerPerOfferSetup() throws {
        guard let pion = PionPeer.require() else { return }
        struct Row { let setup: String, extra: [String], answer: String, role: String, connects: Bool }
        let rows = [Row(setup: "actpass", extra: [], answer: "active", role: "client", connects: true),
                    Row(setup: "active", extra: [], answer: "active", role: "server", connects: false),
                    Row(setup: "passive", extra: [], answer: "active", role: "client", connects: true),
                    Row(setup: "actpass", extra: ["--answer-setup", "passive"], answer: "passive", role: "server", connects: true)]
        var table: [String] = []
        for row in rows {
            let name = "pion-matrix-\(row.setup)\(row.extra.isEmpty ? "" : "-passive")"
            let peer = try PionAnswerer(binary: pion, ["--mode", "echo", "--no-peer-channel", "--offer-setup", row.setup] + row.extra, name: name)
            let agent = try LineProcess(Linnet.executable.path, ["run", "--whip", "http://127.0.0.1:\(peer.port)/whip", "--capture", "none",
                                                                 "--playback", "none", "--events", "-"], stderr: temporary("\(name)-run.log"))
            defer { agent.stop(); unlink(temporary("\(name)-run.log")) }
            let answered = peer.process.waitFor { $0.hasPrefix("ANSWERED ") } ?? ""
            // The DTLS handshake starts once ICE is up, connected or not.
            let dtls = peer.process.waitFor { $0.hasPrefix("DTLS ") } ?? ""
            var connected = false
            if row.connects {
                connected = agent.waitFor { isState($0, "connected") } != nil
                // Linnet, the DTLS server here, is connected a flight before pion is: end the
                // call only once pion says so (under load the SIGTERM's close won the race).
                if connected { _ = peer.process.waitFor { $0.hasPrefix("CONNECTED ") } }
            }
            agent.signal(SIGTERM)
            agent.process.waitUntilExit()
            let report = try peer.stop()
            let call = (report["sessions"] as? [[String: Any]])?.first ?? [:]
            let answer = call["answer_setup"] as? String ?? "?", role = call["dtls_role"] as? String ?? "?"
            table.append("PION matrix: offer a=setup:\(row.setup)\(row.extra.isEmpty ? "" : " (--answer-setup passive)") → answer a=setup:\(answer), "
                + "pion DTLS \(role), \(call["ever_connected"] as? Bool == true ? "connected" : "not connected")")
            #expect(answered.contains("applied=\(row.setup)") && answered.contains("answer=\(row.answer)"), "\(answered)")
            #expect(dtls.hasSuffix(" \(row.role)"), "\(dtls)")
            #expect(answer == row.answer && role == row.role)
            #expect(call["ever_connected"] as? Bool == row.connects, "\(row.setup): \(peer.logText.suffix(400))")
            #expect(connected == row.connects)
        }
        for line in table { print(line) }
    }
}
