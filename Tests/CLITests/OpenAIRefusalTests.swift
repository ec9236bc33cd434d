import Testing
import Foundation
import Glibc

/// "Errors that need different answers", end to end: the aiortc stand-in's
/// OpenAI route refuses the offer as OpenAI documents (`--openai-error`: status, JSON
/// error body, headers), and Linnet's reaction is read from what it did — its exit
/// status, its message, its `retry` event (the wait it chose), its status file and the
/// offers the stand-in saw. Each run is bounded by `--max-attempts`, so no test waits
/// out a long back-off.
@Suite(.serialized) struct OpenAIRefusalTests {
    struct Outcome {
        let status: Int32
        let err: String
        let retries: [[String: Any]]
        let statusFile: [String: Any]
        let report: [String: Any]
    }

    func run(_ error: String, failCount: Int? = nil, attempts: Int, seconds: Int = 1, name: String) throws -> Outcome? {
        guard let python = InteropPeer.require() else { return nil }
        let peer = try InteropPeer(python: python, mode: "openai",
                                   extra: ["--ephemeral", "--token", "device-secret", "--openai-error", error]
                                       + (failCount.map { ["--fail-count", String($0)] } ?? []), name: name)
        let token = temporary("\(name)-token"), events = temporary("\(name)-events.jsonl"), status = temporary("\(name)-status.json")
        defer { unlink(token); unlink(events); unlink(status) }
        try "device-secret\n".write(toFile: token, atomically: true, encoding: .utf8)
        let base = "http://127.0.0.1:\(peer.port)"
        let r = try runBounded(["run", "--openai", "--token-url", base + "/token", "--openai-url", base + "/v1/realtime/calls",
                                "--token-file", token, "--capture", "none", "--playback", "none", "--max-attempts", String(attempts),
                                "--seconds", String(seconds), "--events", events, "--status-file", status], limit: 30, name: name)
        #expect(!r.timedOut, "linnet did not end: \(r.err)")
        let lines = ((try? String(contentsOfFile: events, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { event(String($0)) }
        let file = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: status)))) as? [String: Any] ?? [:]
        return Outcome(status: r.status, err: r.err, retries: lines.filter { $0["type"] as? String == "retry" },
                       statusFile: file, report: try peer.stop())
    }

    /// 429 with `retry-after-ms: 1500` (a rate limit): the next attempt waits exactly
    /// what was asked — more than the first ordinary back-off (at most 500 ms), so a
    /// Linnet that ignored the header would wait less — and then connects.
    @Test func rateLimitHonoursRetryAfterMs() throws {
        guard let o = try run("rate-limit-ms:1500", failCount: 1, attempts: 2, name: "oai-429-ms") else { return }
        #expect(o.status == 0, "\(o.err)")
        #expect(o.retries.count == 1 && o.retries.first?["delay_ms"] as? Int == 1500, "\(o.retries)")
        #expect((o.retries.first?["error"] as? String)?.contains("429") == true, "\(o.retries)")
        #expect(o.report["offers"] as? Int == 2)
        let call = (o.report["sessions"] as? [[String: Any]])?.first ?? [:]
        #expect((call["states"] as? [[String: Any]] ?? []).contains { $0["what"] as? String == "connection" && $0["state"] as? String == "connected" }, "\(call["states"] ?? "")")
    }

    /// 429 `insufficient_quota`: not a rate limit. Linnet says the account is out of
    /// quota, the status file names the problem, and the wait before a next attempt is
    /// the long one (≥ 15 s, half of the 30 s start, where a rate limit starts at 0.5 s).
    @Test func insufficientQuotaIsNotARateLimit() throws {
        guard let o = try run("quota", attempts: 1, name: "oai-quota") else { return }
        #expect(o.status == 69, "\(o.err)")
        #expect(o.err.contains("out of quota") && o.err.contains("You exceeded your current quota"), "\(o.err)")
        #expect(o.statusFile["problem"] as? String == "insufficient_quota", "\(o.statusFile)")
        #expect((o.retries.first?["delay_ms"] as? Int ?? 0) >= 15_000, "\(o.retries)")
        #expect(o.report["offers"] as? Int == 1)
    }

    /// 400 `invalid_offer` with OpenAI's JSON body: a data error (65) showing OpenAI's
    /// own message and code, with the long back-off, not the 0.5–30 s retry loop.
    @Test func invalidOfferIsADataError() throws {
        guard let o = try run("invalid-offer", attempts: 1, name: "oai-invalid-offer") else { return }
        #expect(o.status == 65, "\(o.err)")
        #expect(o.err.contains("Invalid SDP offer. Please try again with a WHIP-compliant offer.") && o.err.contains("[invalid_offer]"), "\(o.err)")
        #expect((o.retries.first?["delay_ms"] as? Int ?? 0) >= 15_000, "\(o.retries)")
        #expect(o.report["offers"] as? Int == 1)
    }

    /// 403 `unsupported_country_region_territory`: a configuration error (78) with its
    /// own message, which does not blame the token.
    @Test func regionNotSupportedIsAConfigurationError() throws {
        guard let o = try run("region", attempts: 1, name: "oai-region") else { return }
        #expect(o.status == 78, "\(o.err)")
        #expect(o.err.contains("does not serve this country or region") && o.err.contains("the token is not the problem"), "\(o.err)")
        #expect(o.err.contains("Country, region, or territory not supported"), "\(o.err)")
        #expect(!o.err.lowercased().contains("check the token"), "\(o.err)")
        #expect((o.retries.first?["delay_ms"] as? Int ?? 0) >= 15_000, "\(o.retries)")
        #expect(o.report["offers"] as? Int == 1)
    }
}
