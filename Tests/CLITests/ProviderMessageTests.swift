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
}
