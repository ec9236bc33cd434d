import Foundation
import Testing
import Wire
import JSON
@testable import Agent

/// `response.done`'s usage (the GA shape) and the metrics file's text format.
@Suite struct ProviderUsageTests {
    @Test func aResponsesUsageIsCountedByModality() throws {
        let u = try #require(ProviderUsage.parse(try JSONValue.parse(#"""
            {"total_tokens": 391, "input_tokens": 180, "output_tokens": 211,
             "input_token_details": {"text_tokens": 120, "audio_tokens": 60, "image_tokens": 0, "cached_tokens": 64,
                                     "cached_tokens_details": {"text_tokens": 64, "audio_tokens": 0}},
             "output_token_details": {"text_tokens": 11, "audio_tokens": 200}}
            """#)))
        #expect(u.inputTextTokens == 120 && u.inputAudioTokens == 60 && u.inputCachedTokens == 64)
        #expect(u.outputTextTokens == 11 && u.outputAudioTokens == 200 && u.totalTokens == 391 && u.responses == 1)
        var total = ProviderUsage()
        total += u
        total += u
        #expect(total.inputTokens == 360 && total.responses == 2)
        // Totals without details count as text.
        let bare = try #require(ProviderUsage.parse(try JSONValue.parse(#"{"input_tokens": 5, "output_tokens": 7}"#)))
        #expect(bare.inputTextTokens == 5 && bare.outputTextTokens == 7)
    }

    /// A cap must not move on nonsense: a negative, fractional, huge or non-numeric
    /// count makes the whole report unusable; `null` (the stand-in's old shape) is none.
    @Test func nonsenseIsNotCounted() throws {
        for bad in [#"{"input_tokens": -1}"#, #"{"input_tokens": 1.5}"#, #"{"output_tokens": 1e12}"#,
                    #"{"input_token_details": {"audio_tokens": "many"}}"#, "null", "[]"] {
            #expect(ProviderUsage.parse(try JSONValue.parse(bad)) == nil, "\(bad)")
        }
        #expect(ProviderUsage.parse(nil) == nil)
    }

    /// The Grafana dashboard (board/grafana/linnet-fleet.json) queries only series
    /// Linnet writes: every `linnet_…` name in its panels is a family of a connected
    /// core's metrics file, or one of the two the runtime adds under systemd's watchdog.
    /// (CLITests' prometheusScrapesACall checks them against a real Prometheus.)
    @Test func theDashboardQueriesOnlyWrittenSeries() throws {
        let w = try ProviderWorld(ProviderWorld.Options())
        w.core.setCalendar(LocalCalendar(localSecondsAtZero: 0))
        w.startCore()
        _ = try #require(w.run(within: .seconds(10)) { w.core.state == .connected && w.core.activePeer?.stats.roundTripTime != nil })
        let text = String(decoding: w.core.metricsText(version: "t", unixTime: 0), as: UTF8.self)
        var written = Set(text.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map { String($0.split(separator: " ")[2]) })
        written.formUnion(["linnet_watchdog_healthy", "linnet_watchdog_pings_total"])
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("board/grafana/linnet-fleet.json").path
        let dashboard = try String(contentsOfFile: path, encoding: .utf8)
        var named = Set<String>()
        var rest = Substring(dashboard)
        while let r = rest.range(of: "linnet_") {
            let tail = rest[r.lowerBound...]
            let name = tail.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
            named.insert(String(name))
            rest = tail.dropFirst(name.count)
        }
        named.remove("linnet_")  // the uid "linnet-fleet" is not a series, and has no underscore
        #expect(named.count >= 20)
        #expect(named.subtracting(written).isEmpty, "the dashboard names series Linnet never writes: \(named.subtracting(written).sorted())")
    }

    @Test func labelValuesAreEscaped() {
        var m = MetricsText()
        m.family("linnet_build_info", "gauge", "Linnet's version; always 1.")
        m.sample("linnet_build_info", [("version", "0.1\"\n\\x")], 1)
        m.sample("linnet_rtt_seconds", [], 0.0425)
        #expect(String(decoding: m.bytes, as: UTF8.self) == """
            # HELP linnet_build_info Linnet's version; always 1.
            # TYPE linnet_build_info gauge
            linnet_build_info{version="0.1\\"\\n\\\\x"} 1
            linnet_rtt_seconds 0.0425

            """)
    }
}
