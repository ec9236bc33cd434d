import Testing
import Foundation
import Glibc
@testable import linnet
@testable import Runtime

// The provider-side messages and exit statuses of `linnet run`.

@Suite(.serialized) struct ProviderMessageTests {
    let quiet = ["--capture", "none", "--playback", "none"]

    /// The exit-status rule: 65 for an answer that came but is not usable data (its HTTP
    /// framing or its SDP broken), 69 for no answer (refused, timed out) or a provider
    /// that says it cannot (5xx), 78 for 401/403 — the same for run and check.
    @Test func exitStatusesFollowOneRule() throws {
        let http = try StubProvider("http-garbage")
        let h = try runBounded(["run", "--whip", http.url, "--max-attempts", "1"] + quiet)
        #expect(h.status == 65 && h.err.contains("malformed"), "\(h.err)")
        let hc = try runBounded(["check", "--whip", http.url] + quiet)
        #expect(hc.status == 65, "\(hc.out)")

        let sdp = try StubProvider("sdp-garbage")
        let s = try runBounded(["run", "--whip", sdp.url, "--max-attempts", "1"] + quiet)
        #expect(s.status == 65 && s.err.contains("unusable"), "\(s.err)")

        let (sock, port) = boundTCPSocket()
        close(sock)
        let refused = try runBounded(["run", "--whip", "http://127.0.0.1:\(port)/whip", "--max-attempts", "1"] + quiet)
        #expect(refused.status == 69, "\(refused.err)")
        let rc = try runBounded(["check", "--whip", "http://127.0.0.1:\(port)/whip"] + quiet)
        #expect(rc.status == 69, "\(rc.out)")
    }

    /// A day-long Retry-After is shown as the wait the agent will really do (capped), and
    /// a max-attempts run does not sit out 10-minute waits: it ends at once, saying why.
    @Test func cappedRetryAfterAndMaxAttemptsBudget() throws {
        let stub = try StubProvider("retry-after")
        let r = try runBounded(["run", "--whip", stub.url, "--max-attempts", "3"] + quiet, limit: 30)
        #expect(!r.timedOut, "a max-attempts run waited for the server's Retry-After: \(r.err)")
        #expect(r.status == 69, "\(r.err)")
        #expect(!r.err.contains("999999999.000s"), "\(r.err)")
        #expect(r.err.contains("retry after 600 s"), "\(r.err)")
        #expect(r.err.contains("giving up") && r.err.contains("max-attempts"), "\(r.err)")
    }

    /// A provider that rejects the data channel (`m=application 0`): one warning naming
    /// what is lost, and a `channel` event saying it was rejected.
    @Test func rejectedDataChannelIsAWarning() throws {
        let stub = try StubProvider("reject-datachannel")
        let log = temporary("reject-dc.log")
        defer { unlink(log) }
        let agent = try LineProcess(Linnet.executable.path, ["run", "--whip", stub.url, "--events", "-", "--max-attempts", "1"] + quiet,
                                    stderr: log)
        defer { agent.stop() }
        let rejected = agent.waitFor { event($0)?["type"] as? String == "channel" && event($0)?["event"] as? String == "rejected" }
        #expect(rejected != nil)
        agent.signal(SIGTERM)
        agent.process.waitUntilExit()
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        let warnings = text.split(separator: "\n").filter { $0.contains("warning:") && $0.contains("data channel") }
        #expect(warnings.count == 1, "\(text)")
        #expect(warnings.first?.contains("no events channel") == true, "\(text)")
    }
}
