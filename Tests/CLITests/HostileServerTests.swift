import Testing
import Foundation

/// Tests/Interop/hostile_server.py: a signaling server that redirects, plants
/// `Location`s and ids, and echoes headers. It prints `READY <home> <foreign>`; the
/// foreign port is another origin (RFC 6454) that logs what reaches it.
final class HostileServer {
    static let script = InteropPeer.packageRoot + "/Tests/Interop/hostile_server.py"
    let process: ReadyProcess
    let log: String
    var home: Int { Int(process.fields[1])! }
    var foreign: Int { Int(process.fields[2])! }

    init(_ mode: String, id: String? = nil, upstream: Int? = nil, name: String) throws {
        log = temporary("\(name)-requests.jsonl")
        var args = [Self.script, "--mode", mode, "--log", log]
        if let id { args += ["--id", id] }
        if let upstream { args += ["--upstream", "http://127.0.0.1:\(upstream)"] }
        process = try ReadyProcess("/usr/bin/python3", args, name: name)
    }

    /// Every request either listener got, in order.
    func requests() -> [[String: Any]] {
        process.stop()
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    deinit { unlink(log) }
}

func headerValue(_ request: [String: Any], _ name: String) -> String? {
    (request["headers"] as? [String: String])?.first { $0.key.lowercased() == name.lowercased() }?.value
}

/// The token goes only to the
/// origin it was configured for, and nothing a server sends can reshape our requests.
@Suite(.serialized) struct HostileServerTests {
    static let token = "device-token-0123456789abcdef"

    func tokenFile() throws -> String {
        let path = temporary("hostile-token")
        try Self.token.write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        return path
    }

    func answerer(_ name: String) throws -> ReadyProcess {
        try ReadyProcess(Linnet.executable.path, ["answer", "--listen", "127.0.0.1:0", "--mode", "echo"], name: name)
    }

    /// A 307 to another origin is followed without the token (as browsers and curl
    /// do); before, the `Authorization` header went along.
    @Test func redirectToAnotherOriginGetsNoToken() throws {
        let server = try HostileServer("redirect-foreign", name: "redir-foreign")
        let token = try tokenFile()
        defer { unlink(token) }
        let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(server.home)/whip", "--token-file", token, "--max-attempts", "1",
                                "--capture", "none", "--playback", "none"])
        let requests = server.requests()
        let home = requests.filter { $0["listener"] as? String == "home" }
        let foreign = requests.filter { $0["listener"] as? String == "foreign" }
        #expect(home.count == 1 && headerValue(home[0], "Authorization") == "Bearer \(Self.token)")
        #expect(foreign.count == 1, "the redirect was followed")
        #expect(foreign.allSatisfy { headerValue($0, "Authorization") == nil }, "the token went to another origin")
        #expect(r.err.contains("another origin") && r.err.contains("the token is not sent there"), "\(r.err)")
        #expect(!r.err.contains(Self.token))
    }

    /// A redirect to another scheme is refused (not read as a relative path), and a
    /// redirect loop says so.
    @Test(arguments: [("redirect-ftp", "not an http(s) URL"), ("redirect-loop", "redirected too many times")])
    func refusedRedirects(mode: String, says: String) throws {
        let server = try HostileServer(mode, name: "redir-\(mode)")
        let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(server.home)/whip", "--max-attempts", "1",
                                "--capture", "none", "--playback", "none"])
        #expect(r.status == 65, "\(r.status) \(r.err)")
        #expect(r.err.contains(says), "\(r.err)")
        let requests = server.requests()
        #expect(requests.count <= 4 && requests.allSatisfy { $0["listener"] as? String == "home" })
    }

    /// A WHIP `Location` on another origin: the session works, and the DELETE that ends
    /// it goes there without the token (before, it carried it).
    @Test func foreignLocationGetsNoToken() throws {
        let upstream = try answerer("loc-answer")
        let server = try HostileServer("location-foreign", upstream: Int(upstream.fields[1])!, name: "loc-foreign")
        let token = try tokenFile()
        defer { unlink(token) }
        let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(server.home)/whip", "--token-file", token, "--seconds", "2",
                                "--capture", "none", "--playback", "none"])
        #expect(r.status == 0, "\(r.err)")
        let foreign = server.requests().filter { $0["listener"] as? String == "foreign" }
        #expect(foreign.contains { $0["method"] as? String == "DELETE" })
        #expect(foreign.allSatisfy { headerValue($0, "Authorization") == nil }, "the token went to another origin")
        #expect(r.err.contains("on another origin"), "\(r.err)")
    }

    /// The backend's voice id goes into the close route's path: CRLF, `../` and other
    /// bytes are refused (no close request, a warning) instead of making a header of
    /// their own or walking the path; a numeric id is used, written in decimal.
    @Test(arguments: [("\"a\\r\\nX-Injected: 1\"", nil), ("\"../../admin?x=\"", nil), ("42", "/voice/chat7/42/close"),
                      ("\"v-1.a_b~c\"", "/voice/chat7/v-1.a_b~c/close")] as [(String, String?)])
    func backendIDsCannotReshapeTheCloseRequest(id: String, closePath: String?) throws {
        let upstream = try answerer("id-answer")
        let server = try HostileServer("backend-id", id: id, upstream: Int(upstream.fields[1])!, name: "backend-id")
        let r = try Linnet.run(["run", "--backend", "http://127.0.0.1:\(server.home)", "--chat", "chat7", "--seconds", "2",
                                "--capture", "none", "--playback", "none"])
        #expect(r.status == 0, "\(r.err)")
        let requests = server.requests()
        #expect(requests.allSatisfy { headerValue($0, "X-Injected") == nil })
        #expect(requests.allSatisfy { !($0["path"] as? String ?? "").contains("admin") })
        let closes = requests.filter { ($0["path"] as? String ?? "").hasSuffix("/close") }.map { $0["path"] as? String }
        if let closePath {
            #expect(closes == [closePath])
        } else {
            #expect(closes.isEmpty)
            #expect(r.err.contains("voice id is unusable"), "\(r.err)")
        }
    }

    /// A stranger who read the offer sprays its candidates from fresh ports (ClientHellos,
    /// DTLS and SRTP junk, STUN without credentials) while the answer is on its way:
    /// every call still connects and carries audio, and the strangers are counted.
    @Test func callsConnectUnderASprayOfStrangers() throws {
        let upstream = try answerer("spray-answer")
        let server = try HostileServer("spray", upstream: Int(upstream.fields[1])!, name: "spray")
        let input = temporary("spray-in.wav")
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(440, amplitude: 0.25, seconds: 2, rate: 48_000).map { Int32($0 * 32_767) })
        defer { unlink(input) }
        var connected = 0, dropped = 0
        let calls = 10
        for i in 0..<calls {
            let events = temporary("spray-\(i).jsonl")
            defer { unlink(events) }
            let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(server.home)/whip", "--seconds", "2", "--input", input,
                                    "--playback", "none", "--events", events, "--max-attempts", "1"])
            let lines = ((try? String(contentsOfFile: events, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            let stats = lines.last { $0["type"] as? String == "stats" }
            if r.status == 0, lines.contains(where: { $0["state"] as? String == "connected" }), (stats?["packets_received"] as? Int ?? 0) > 10 {
                connected += 1
            }
            dropped += stats?["stranger_dropped"] as? Int ?? 0
            #expect(r.status == 0, "call \(i): \(r.err)")
        }
        let sprays = server.requests().filter { $0["listener"] as? String == "sprayer" }
        let sent = sprays.reduce(0) { $0 + ($1["sent"] as? Int ?? 0) }
        print("BENCH stranger_spray_e2e: \(connected)/\(calls) calls connected with audio; \(sent) stranger datagrams sent, \(dropped) counted as dropped")
        #expect(connected == calls)
        #expect(sprays.count == calls && sent > 1000)
        #expect(dropped > 0)
    }

    /// A 401 whose page echoes the request's headers: the token is in neither the log
    /// nor the events file.
    @Test func echoedTokenIsRedacted() throws {
        let server = try HostileServer("echo-401", name: "echo-401")
        let token = try tokenFile()
        let events = temporary("echo-401-events.jsonl")
        defer { unlink(token); unlink(events) }
        let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(server.home)/whip", "--token-file", token, "--max-attempts", "1",
                                "--events", events, "--capture", "none", "--playback", "none"])
        #expect(r.status == 78, "\(r.err)")
        #expect(r.err.contains("401") && r.err.contains("[redacted]"), "\(r.err)")
        #expect(!r.err.contains(Self.token))
        let written = (try? String(contentsOfFile: events, encoding: .utf8)) ?? ""
        #expect(!written.contains(Self.token))
        _ = server.requests()
    }
}
