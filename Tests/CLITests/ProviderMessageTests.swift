import Testing
import Foundation
import Glibc
@testable import linnet

// Issue 13: the provider-side messages and exit statuses of `linnet run`.

@Suite(.serialized) struct ProviderMessageTests {
    let quiet = ["--capture", "none", "--playback", "none"]

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
