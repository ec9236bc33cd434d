import Testing
import Foundation

/// The second independent stack: GStreamer 1.22's webrtcbin (libnice, OpenSSL, libsrtp2,
/// usrsctp) through Tests/Interop/gst_peer.py, on Debian's own python with `gi`.
/// `answer` mode serves WHIP and the backend route and prints `READY <port>`; `offer`
/// mode is a WHIP client that runs to completion and exits 0 on success.
enum GStreamerPeer {
    static let script = InteropPeer.packageRoot + "/Tests/Interop/gst_peer.py"

    /// `GST_PYTHON` if it is executable, else whatever Tests/Interop/gst-setup.sh prints
    /// as its last line (it installs the Debian packages when run as root, and checks
    /// every module and element the peer needs); nil when neither works.
    static let python: String? = {
        if let p = ProcessInfo.processInfo.environment["GST_PYTHON"], FileManager.default.isExecutableFile(atPath: p) { return p }
        let setup = Process()
        setup.executableURL = URL(fileURLWithPath: "/bin/sh")
        setup.arguments = [InteropPeer.packageRoot + "/Tests/Interop/gst-setup.sh"]
        let out = Pipe()
        setup.standardOutput = out
        setup.standardError = FileHandle.nullDevice
        guard (try? setup.run()) != nil else { return nil }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        setup.waitUntilExit()
        guard setup.terminationStatus == 0,
              let last = String(decoding: data, as: UTF8.self).split(separator: "\n").last.map(String.init),
              FileManager.default.isExecutableFile(atPath: last) else { return nil }
        return last
    }()

    /// The interpreter, or nil to skip; on CI a missing peer is a failure, not a skip.
    static func require() -> String? {
        if let p = python { return p }
        if ProcessInfo.processInfo.environment["CI"] != nil {
            Issue.record("the GStreamer interop peer cannot run (Tests/Interop/gst-setup.sh failed; or set GST_PYTHON)")
        }
        return nil
    }
}

/// `gst_peer.py answer` as a subprocess, with its report and recording.
final class GStreamerAnswerer {
    let process: ReadyProcess
    let report: String
    let record: String
    var port: String { process.fields[1] }

    init(python: String, mode: String = "echo", offerSetup: String = "keep", extra: [String] = [], name: String) throws {
        report = temporary("\(name)-gst-report.json")
        record = temporary("\(name)-gst-peer.wav")
        process = try ReadyProcess(python, ["-u", GStreamerPeer.script, "answer", "--listen", "127.0.0.1:0", "--mode", mode,
                                            "--offer-setup", offerSetup, "--report", report, "--record", record] + extra,
                                   name: "\(name)-gst-answer")
    }

    /// SIGTERM (the peer ends its calls, writes report and WAV header, exits), then the report.
    func stop() throws -> [String: Any] {
        process.stop()
        let data = try Data(contentsOf: URL(fileURLWithPath: report))
        return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
    }

    var log: String { (try? String(contentsOfFile: process.log, encoding: .utf8)) ?? "" }

    deinit {
        process.stop()
        unlink(report)
        unlink(record)
    }
}

/// Runs a program to its end with stdout and stderr in files (no pipe to fill up).
func runToEnd(_ executable: String, _ arguments: [String], name: String) throws -> (status: Int32, err: String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    let err = temporary("\(name).stderr")
    defer { unlink(err) }
    _ = FileManager.default.createFile(atPath: err, contents: nil)
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle(forWritingAtPath: err)
    try p.run()
    p.waitUntilExit()
    return (p.terminationStatus, (try? String(contentsOfFile: err, encoding: .utf8)) ?? "")
}

/// The ClientHello records the peer's pad probes saw (sent when webrtcbin is the DTLS
/// client, received when it is the server): (offset, length) per fragment, message length.
struct ClientHelloFragments: CustomStringConvertible {
    let direction: String
    let messageLength: Int
    let fragments: [(offset: Int, length: Int, datagram: Int)]

    /// The first ClientHello (message_seq of the first record) in the session's report.
    init?(_ session: [String: Any]) {
        let records = session["client_hello_records"] as? [[String: Any]] ?? []
        guard let first = records.first, let seq = first["message_seq"] as? Int else { return nil }
        let mine = records.filter { $0["message_seq"] as? Int == seq && $0["direction"] as? String == first["direction"] as? String }
        direction = first["direction"] as? String ?? "?"
        messageLength = first["message_length"] as? Int ?? 0
        fragments = mine.map { ($0["fragment_offset"] as? Int ?? -1, $0["fragment_length"] as? Int ?? -1, $0["datagram_bytes"] as? Int ?? -1) }
    }

    /// The fragments tile the whole message, in order, without gaps or overlaps.
    var isComplete: Bool {
        var next = 0
        for f in fragments {
            guard f.offset == next else { return false }
            next += f.length
        }
        return next == messageLength
    }

    var description: String {
        "\(direction) ClientHello of \(messageLength) bytes in \(fragments.count) fragment(s): "
            + fragments.map { "\($0.offset)+\($0.length) (datagram \($0.datagram) B)" }.joined(separator: ", ")
    }
}

/// "+0.12 dB".
func decibels(_ x: Double) -> String { String(format: "%+.2f dB", x) }

/// One webrtcbin-offers case: the setup it offers, what Linnet must answer, and so the
/// DTLS role webrtcbin ends up with.
struct OfferCase: Sendable, CustomStringConvertible {
    let setup: String
    let answered: String
    let webrtcbinRole: String
    var description: String { "setup \(setup)" }
}

@Suite(.serialized) struct GStreamerInteropTests {
    static let amplitude = 0.25
    /// RMS of Linnet's input tone (0.25 full scale).
    static let toneRMS = amplitude * 32_767 / 2.0.squareRoot()
    /// RMS of the peer's own tone: -12 dBFS peak (audiotestsrc volume 10^(-12/20)).
    static let peerToneRMS = pow(10, -12.0 / 20) * 32_767 / 2.0.squareRoot()

    /// The setup webrtcbin answers with, per setup in the offer (measured, asserted below).
    static let webrtcbinAnswers = ["actpass": "active", "active": "passive", "passive": "active"]

    struct Outcome {
        let report: [String: Any]
        let session: [String: Any]
        let events: [[String: Any]]
        let linnetErr: String
        let back: [Int16]
        let heard: [Int16]
    }

    /// `linnet run` offers to webrtcbin answering in echo mode (the offer's a=setup
    /// rewritten to `offerSetup` before webrtcbin sees it), with a 440 Hz tone in, what
    /// came back out, two messages to send on `oai-events` (one over 1200 bytes).
    func linnetOffers(route: String, offerSetup: String, name: String, sent: [String]) throws -> Outcome? {
        guard let python = GStreamerPeer.require() else { return nil }
        let peer = try GStreamerAnswerer(python: python, offerSetup: offerSetup, name: name)
        let input = temporary("\(name)-in.wav"), output = temporary("\(name)-out.wav")
        let events = temporary("\(name)-ev.jsonl"), send = temporary("\(name)-send.txt")
        defer { unlink(input); unlink(output); unlink(events); unlink(send) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(440, amplitude: Self.amplitude, seconds: 6, rate: 48_000).map { Int32($0 * 32_767) })
        try (sent.joined(separator: "\n") + "\n").write(toFile: send, atomically: true, encoding: .utf8)
        let routeArgs = route == "whip" ? ["--whip", "http://127.0.0.1:\(peer.port)/whip"]
            : ["--backend", "http://127.0.0.1:\(peer.port)", "--chat", "chat-gst"]
        // --interfaces lo: the peer gathers on 127.0.0.1 only, so must we.
        let r = try Linnet.run(["run"] + routeArgs + ["--input", input, "--output", output, "--send", send, "--events", events,
                                                      "--seconds", "5", "--interfaces", "lo"])
        #expect(r.status == 0, "\(r.err)")
        let report = try peer.stop()
        let session = (report["sessions"] as? [[String: Any]])?.first ?? [:]
        let lines = (try? String(contentsOfFile: events, encoding: .utf8))?.split(separator: "\n").compactMap { event(String($0)) } ?? []
        let back = (try? WAVFile.read16(output).1) ?? []
        let heard = (try? WAVFile.read16(peer.record).1) ?? []
        if session.isEmpty { Issue.record("no session in the peer's report; its log:\n\(peer.log)") }
        return Outcome(report: report, session: session, events: lines, linnetErr: r.err, back: back, heard: heard)
    }

    /// What every Linnet-offers call must show, whichever route and roles.
    func checkCall(_ o: Outcome, route: String, name: String, sent: [String]) {
        let s = o.session
        #expect(s["ever_connected"] as? Bool == true, "\(s["states"] ?? "no states")")
        #expect(s["route"] as? String == (route == "whip" ? "whip" : "backend"))
        #expect((s["rtp_packets_received"] as? Int ?? 0) > 200, "webrtcbin received \(s["rtp_packets_received"] ?? 0) RTP packets")
        #expect((s["rtp_packets_sent"] as? Int ?? 0) > 200, "webrtcbin sent \(s["rtp_packets_sent"] ?? 0) RTP packets")
        // Every datagram stayed on loopback.
        for pair in s["selected_pairs"] as? [[String: [String: Any]]] ?? [] {
            #expect(pair["local"]?["ip"] as? String == "127.0.0.1" && pair["remote"]?["ip"] as? String == "127.0.0.1")
        }
        // What webrtcbin's own decoder made of Linnet's stream: the tone at the level sent.
        let heardFraction = fractionOfWindowsWithTone(Array(o.heard.dropFirst(24_000)), 440, rate: 48_000, rms: Self.toneRMS, levelDB: 1)
        #expect(heardFraction > 0.8, "webrtcbin heard 440 Hz at level in \(Int(heardFraction * 100)) % of windows")
        // What came back: decoded by webrtcbin, re-encoded (opusenc), decoded by Linnet.
        let (backFraction, backSeconds, backMap) = judgeOutput(o.back, 440, rms: Self.toneRMS, levelDB: 1)
        #expect(backSeconds >= 4, "the echo lasted \(backSeconds) s of the 5 s call: \(backMap)")
        #expect(backFraction > 0.8, "440 Hz back at level in \(Int(backFraction * 100)) % of windows: \(backMap)")
        let heardDB = 20 * log10(Signal.rms(o.heard.dropFirst(24_000)[...]) / Self.toneRMS)
        let backDB = 20 * log10(Signal.rms(o.back.dropFirst(24_000)[...]) / Self.toneRMS)
        // Data channels both ways: our messages echoed in order, intact, on oai-events;
        // webrtcbin's own channel brings its hello and a 20,000-byte text.
        let messages = o.events.filter { $0["type"] as? String == "message" }
        let echoes = messages.filter { $0["label"] as? String == "oai-events" }.compactMap { $0["text"] as? String }
            .filter { !$0.contains("\"session.update\"") }
        #expect(echoes == sent, "echoes: \(echoes.map { $0.utf8.count })")
        let fromPeer = messages.filter { $0["label"] as? String == "peer-events" }.compactMap { $0["text"] as? String }
        #expect(fromPeer.first.map { $0.contains("\"hello\"") && $0.contains("\"gstreamer\"") } == true, "\(fromPeer.map { $0.prefix(60) })")
        #expect(fromPeer.contains { $0.utf8.count == 20_000 && $0.hasPrefix("big:0123456789") })
        let labels = s["data_channel_labels"] as? [String] ?? []
        #expect(labels.contains("oai-events") && labels.contains("peer-events"), "\(labels)")
        // The provider-side close went out.
        let http = o.report["http"] as? [[String: Any]] ?? []
        let closed = http.contains {
            (route == "whip" ? ($0["method"] as? String) == "DELETE" : ($0["path"] as? String)?.hasSuffix("/close") == true)
                && ($0["status"] as? Int) == 200
        }
        #expect(closed, "\(http)")
        let hello = ClientHelloFragments(s).map(\.description) ?? "no ClientHello seen"
        print("GST \(name): offer \(s["offer_setup_applied"] ?? "?") → answer \(s["answer_setup"] ?? "?"), webrtcbin DTLS \(s["dtls_role"] ?? "?"); "
              + "heard \(decibels(heardDB)) (\(Int(heardFraction * 100)) %), back \(decibels(backDB)) (\(Int(backFraction * 100)) %); \(hello)")
    }

    static let sent = ["{\"type\":\"ping\",\"from\":\"linnet\"}",
                       "{\"type\":\"gst.test\",\"pad\":\"" + String(repeating: "0123456789", count: 300) + "\"}"]

    /// Linnet offers actpass over WHIP; webrtcbin answers active and is the DTLS client,
    /// so Linnet's DTLS server meets OpenSSL's ClientHello, which webrtcbin sends in two
    /// fragments (observed by the peer's probe on its own nicesink): Linnet reassembles it.
    @Test func linnetOffersOverWHIPAsDTLSServer() throws {
        guard let o = try linnetOffers(route: "whip", offerSetup: "keep", name: "gst-whip", sent: Self.sent) else { return }
        #expect(o.session["offer_setup"] as? String == "actpass")
        #expect(o.session["answer_setup"] as? String == "active")
        #expect(o.session["dtls_role"] as? String == "client")
        let hello = ClientHelloFragments(o.session)
        #expect(hello?.direction == "sent")
        #expect((hello?.fragments.count ?? 0) >= 2, "the ClientHello was not fragmented: \(hello?.description ?? "none seen")")
        #expect(hello?.isComplete == true, "\(hello?.description ?? "none seen")")
        checkCall(o, route: "whip", name: "whip actpass", sent: Self.sent)
    }

    /// The same on the backend route ({"sdp"} → {"id","sdp"}, then /close).
    @Test func linnetOffersOverTheBackendRouteAsDTLSServer() throws {
        guard let o = try linnetOffers(route: "backend", offerSetup: "keep", name: "gst-backend", sent: Self.sent) else { return }
        #expect(o.session["answer_setup"] as? String == "active")
        #expect(o.session["dtls_role"] as? String == "client")
        #expect(o.session["chat_id"] as? String == "chat-gst")
        #expect((ClientHelloFragments(o.session)?.fragments.count ?? 0) >= 2)
        checkCall(o, route: "backend", name: "backend actpass", sent: Self.sent)
    }

    /// webrtcbin is shown `a=setup:active` instead of Linnet's actpass and answers
    /// passive: Linnet follows the answer and is the DTLS client while offering.
    @Test func linnetOffersAsDTLSClient() throws {
        guard let o = try linnetOffers(route: "whip", offerSetup: "active", name: "gst-client", sent: Self.sent) else { return }
        #expect(o.session["offer_setup"] as? String == "actpass")
        #expect(o.session["offer_setup_applied"] as? String == "active")
        #expect(o.session["answer_setup"] as? String == Self.webrtcbinAnswers["active"])
        #expect(o.session["dtls_role"] as? String == "server")
        // Linnet's ClientHello reached webrtcbin (in one piece: mbedtls' is small).
        let hello = ClientHelloFragments(o.session)
        #expect(hello?.direction == "received" && hello?.isComplete == true, "\(hello?.description ?? "none seen")")
        checkCall(o, route: "whip", name: "whip active", sent: Self.sent)
    }

    /// A passive offer (as webrtcbin sees it) is answered active: Linnet is the server
    /// again, here on the backend route. With the two above, the table of what webrtcbin
    /// answers is complete.
    @Test func passiveOfferIsAnsweredActive() throws {
        guard let o = try linnetOffers(route: "backend", offerSetup: "passive", name: "gst-passive", sent: Self.sent) else { return }
        #expect(o.session["offer_setup_applied"] as? String == "passive")
        #expect(o.session["answer_setup"] as? String == Self.webrtcbinAnswers["passive"])
        #expect(o.session["dtls_role"] as? String == "client")
        checkCall(o, route: "backend", name: "backend passive", sent: Self.sent)
    }

    /// Tone mode: webrtcbin's audiotestsrc (440 Hz, -12 dBFS peak, opusenc) arrives at
    /// its level; Linnet sends nothing but silence (no capture).
    /// ICE-TCP (RFC 6544) against libnice: webrtcbin gathers TCP candidates only
    /// (`--ice-transport tcp`: active, passive, simultaneous-open), Linnet's active
    /// candidate connects to its passive one, and the call runs over that connection
    /// in RFC 4571 framing: audio both ways at level, and the data channel.
    @Test func iceTCPToWebrtcbin() throws {
        guard let python = GStreamerPeer.require() else { return }
        let peer = try GStreamerAnswerer(python: python, extra: ["--ice-transport", "tcp"], name: "gst-icetcp")
        let input = temporary("gst-icetcp-in.wav"), output = temporary("gst-icetcp-out.wav"), events = temporary("gst-icetcp-ev.jsonl")
        defer { unlink(input); unlink(output); unlink(events) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(440, amplitude: Self.amplitude, seconds: 6, rate: 48_000).map { Int32($0 * 32_767) })
        let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(peer.port)/whip", "--input", input, "--output", output,
                                "--events", events, "--seconds", "4", "--interfaces", "lo"])
        #expect(r.status == 0, "\(r.err)")
        _ = try peer.stop()
        // The selected pair's local side is the active TCP candidate (port 9, RFC 6544 §4.5).
        #expect(r.err.contains(": path 127.0.0.1:9 → 127.0.0.1:"), "\(r.err)")
        let heard = (try? WAVFile.read16(peer.record).1) ?? []
        let back = (try? WAVFile.read16(output).1) ?? []
        let heardFraction = fractionOfWindowsWithTone(Array(heard.dropFirst(24_000)), 440, rate: 48_000, rms: Self.toneRMS, levelDB: 1)
        #expect(heardFraction > 0.8, "webrtcbin heard 440 Hz at level in \(Int(heardFraction * 100)) % of windows")
        let (backFraction, backSeconds, backMap) = judgeOutput(back, 440, rms: Self.toneRMS, levelDB: 1)
        #expect(backSeconds >= 3, "the echo lasted \(backSeconds) s of the 4 s call: \(backMap)")
        #expect(backFraction > 0.8, "440 Hz back at level in \(Int(backFraction * 100)) % of windows: \(backMap)")
        let ev = (try? String(contentsOfFile: events, encoding: .utf8)) ?? ""
        #expect(ev.contains("\"label\":\"peer-events\""), "no data channel message over ICE-TCP")
        for line in r.err.split(separator: "\n") where line.contains("connect_ms=") {
            print("BENCH icetcp_connect_ms: \(line.split(separator: " ").first { $0.hasPrefix("connect_ms=") }?.dropFirst(11) ?? "?")")
        }
    }

    @Test func toneFromWebrtcbin() throws {
        guard let python = GStreamerPeer.require() else { return }
        let peer = try GStreamerAnswerer(python: python, mode: "tone", name: "gst-tone")
        let output = temporary("gst-tone-out.wav")
        defer { unlink(output) }
        let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(peer.port)/whip", "--capture", "none", "--output", output,
                                "--seconds", "4", "--interfaces", "lo"])
        #expect(r.status == 0, "\(r.err)")
        let report = try peer.stop()
        #expect((report["last"] as? [String: Any])?["rtp_packets_sent"] as? Int ?? 0 > 150)
        let (_, back) = try WAVFile.read16(output)
        let (fraction, seconds, map) = judgeOutput(back, 440, rms: Self.peerToneRMS, levelDB: 1)
        #expect(seconds >= 3, "the tone lasted \(seconds) s of the 4 s call: \(map)")
        #expect(fraction > 0.8, "440 Hz at level in \(Int(fraction * 100)) % of windows: \(map)")
    }

    /// webrtcbin offers (max-bundle: its data section is port 0 + a=bundle-only) to
    /// `linnet answer --mode echo` with `setup`; Linnet answers and echoes audio and
    /// messages. What Linnet answers: actpass → active (Linnet client), active → passive
    /// (Linnet server, webrtcbin's fragmented ClientHello), passive → active.
    @Test(arguments: [OfferCase(setup: "actpass", answered: "active", webrtcbinRole: "server"),
                      OfferCase(setup: "active", answered: "passive", webrtcbinRole: "client"),
                      OfferCase(setup: "passive", answered: "active", webrtcbinRole: "server")])
    func webrtcbinOffersToLinnet(_ c: OfferCase) throws {
        guard let python = GStreamerPeer.require() else { return }
        let (setup, answered, webrtcbinRole) = (c.setup, c.answered, c.webrtcbinRole)
        let name = "gst-offer-\(setup)"
        let answerer = try ReadyProcess(Linnet.executable.path, ["answer", "--listen", "127.0.0.1:0", "--mode", "echo"], name: "\(name)-linnet")
        defer { answerer.stop() }
        let report = temporary("\(name)-report.json"), record = temporary("\(name)-back.wav")
        defer { unlink(report); unlink(record) }
        let r = try runToEnd(python, [GStreamerPeer.script, "offer", "--url", "http://127.0.0.1:\(answerer.fields[1])/whip",
                                      "--setup", setup, "--seconds", "4", "--report", report, "--record", record], name: name)
        #expect(r.status == 0, "\(r.err)")
        let data = try Data(contentsOf: URL(fileURLWithPath: report))
        let top = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
        let s = top["last"] as? [String: Any] ?? [:]
        #expect(top["ok"] as? Bool == true, "\(top["failures"] ?? "")")
        #expect(s["offer_setup"] as? String == setup)
        #expect(s["answer_setup"] as? String == answered)
        #expect(s["dtls_role"] as? String == webrtcbinRole)
        #expect(top["messages_echoed_intact"] as? Bool == true, "sent \(top["messages_sent_sizes"] ?? ""), back \(top["messages_echoed_sizes"] ?? "")")
        #expect((s["rtp_packets_received"] as? Int ?? 0) > 150 && (s["rtp_packets_sent"] as? Int ?? 0) > 150)
        let hello = ClientHelloFragments(s)
        #expect(hello?.direction == (webrtcbinRole == "client" ? "sent" : "received"))
        #expect(hello?.isComplete == true, "\(hello?.description ?? "none seen")")
        if webrtcbinRole == "client" { #expect((hello?.fragments.count ?? 0) >= 2) }
        // Linnet's echo of webrtcbin's tone (encoded frames sent back as they came), as
        // webrtcbin decoded it: 440 Hz at the peer's -12 dBFS.
        let (_, back) = try WAVFile.read16(record)
        let fraction = fractionOfWindowsWithTone(Array(back.dropFirst(24_000)), 440, rate: 48_000, rms: Self.peerToneRMS, levelDB: 1)
        #expect(fraction > 0.8, "440 Hz at level in \(Int(fraction * 100)) % of windows")
        let db = 20 * log10(Signal.rms(back.dropFirst(24_000)[...]) / Self.peerToneRMS)
        print("GST offer \(c.setup) → Linnet answers \(s["answer_setup"] ?? "?"), webrtcbin DTLS \(s["dtls_role"] ?? "?"); "
              + "echo \(decibels(db)) (\(Int(fraction * 100)) %); \(hello?.description ?? "no ClientHello seen")")
    }
}
