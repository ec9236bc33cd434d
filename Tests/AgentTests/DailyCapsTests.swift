import Testing
import Wire
import JSON
@testable import Agent

/// The daily caps (`max-daily-minutes`, `max-daily-tokens`) on the manual clock of
/// ProviderWorld: the day is the local calendar's, handed in as the runtime hands it; a
/// restart is a new core given the usage the old one left (the state file's contents).
@Suite struct DailyCapsTests {
    /// 2026-12-04, days since 1970-01-01 (Python: `(date(2026,12,4) - date(1970,1,1)).days`).
    static let day = 20_791

    /// The calendar on which the world's clock zero is `hh:mm` local time on `day`.
    static func calendar(day: Int = day, _ hh: Int64, _ mm: Int64) -> LocalCalendar {
        LocalCalendar(localSecondsAtZero: Int64(day) * 86_400 + hh * 3_600 + mm * 60)
    }

    @Test func theCalendarAndTheStateFile() throws {
        let c = DailyCapsTests.calendar(23, 59)
        #expect(c.day(at: .zero) == DailyCapsTests.day)
        #expect(c.day(at: .zero + .seconds(59)) == DailyCapsTests.day)
        #expect(c.day(at: .zero + .seconds(60)) == DailyCapsTests.day + 1)
        #expect(c.start(ofDay: DailyCapsTests.day + 1) == .zero + .seconds(60))
        // Before 1970 (a board whose clock was never set) the day still rounds down.
        #expect(LocalCalendar(localSecondsAtZero: 0).day(at: Instant(nanoseconds: -1)) == -1)
        // Dates against Python's datetime: 0, a leap day, this one.
        #expect(DailyUsage.date(0) == "1970-01-01" && DailyUsage.date(11_016) == "2000-02-29" && DailyUsage.date(DailyCapsTests.day) == "2026-12-04")
        let u = DailyUsage(day: DailyCapsTests.day, connectedMilliseconds: 754_321, tokens: 12_345)
        #expect(DailyUsage.parse(u.json) == u)
        #expect(String(decoding: u.json, as: UTF8.self) == #"{"date":"2026-12-04","day":20791,"connected_ms":754321,"tokens":12345}"# + "\n")
        // Anything else (cut short, edited, lies) is not a count.
        for bad in ["", "{", "[]", #"{"day":20791,"connected_ms":-5,"tokens":0}"#, #"{"day":20791,"connected_ms":1.5,"tokens":0}"#,
                    #"{"day":20791,"connected_ms":86400001,"tokens":0}"#, #"{"day":"today","connected_ms":0,"tokens":0}"#,
                    #"{"connected_ms":0,"tokens":0}"#] {
            #expect(DailyUsage.parse(Array(bad.utf8)) == nil, "\(bad)")
        }
    }

    func world(_ caps: DailyCaps, route: ProviderWorld.RouteKind = .whip, calendar: LocalCalendar,
               restored: DailyUsage? = nil) throws -> ProviderWorld {
        var o = ProviderWorld.Options()
        o.route = route
        o.configure = { $0.caps = caps }
        let w = try ProviderWorld(o)
        if route == .openai { w.provider.onMessage = WorldProvider.realtimeScript }
        w.core.setCalendar(calendar, restored: restored)
        return w
    }

    /// Two minutes a day, the call starting at 23:50: the session is closed when its
    /// connected time reaches two minutes, no session starts for the rest of the day
    /// (the status says why, the metrics say so), and at local midnight one starts
    /// again (reason `resume`) with the day's count from zero.
    @Test func theMinutesCapPausesSessionsUntilTheNextLocalDay() throws {
        let w = try world(DailyCaps(minutes: 2), calendar: DailyCapsTests.calendar(23, 50))
        w.startCore()
        let connected = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        let paused = try #require(w.run(within: .seconds(300)) { w.core.state == .paused })
        // Counted on the clock: the pause comes as the connected time reaches 120 s.
        #expect(paused - connected == .seconds(120), "paused \(w.seconds(paused - connected)) s after connecting")
        #expect(w.core.todaySoFar?.connectedMilliseconds == 120_000)
        #expect(w.requests("DELETE").count == 1, "the provider's session is closed")
        let cap = try #require(w.records("cap").last)
        #expect(cap["reached"]?.bool == true && cap["until"]?.string == "2026-12-05")
        #expect(w.core.statusSnapshot.problem?.contains("max-daily-minutes reached (2 of 2 min") == true)
        let metrics = String(decoding: w.core.metricsText(version: "t", unixTime: 0), as: UTF8.self)
        #expect(metrics.contains("linnet_daily_cap_reached 1") && metrics.contains("linnet_session_state{state=\"paused\"} 1")
                && metrics.contains("linnet_daily_connected_seconds 120"), "\(metrics)")
        // Nothing until midnight (600 s after the world's zero), however long it waits.
        let sessionsBefore = w.records("session").count
        w.run(until: .zero + .seconds(599))
        #expect(w.core.state == .paused && w.records("session").count == sessionsBefore)
        let resumed = try #require(w.run(within: .seconds(10)) { w.core.state == .connected })
        #expect(w.stateTimes("connecting").last == .zero + .seconds(600), "the new day's session starts at midnight")
        #expect(w.records("session").last?["reason"]?.string == "resume")
        #expect(w.core.sessionStarts.resume == 1 && w.core.capped == nil)
        w.run(for: .seconds(30))
        let today = try #require(w.core.todaySoFar)
        #expect(today.day == DailyCapsTests.day + 1)
        #expect(today.connectedMilliseconds == (w.now - resumed).milliseconds, "the new day counts only its own connected time")
        #expect(w.core.statusSnapshot.problem == nil)
    }

    /// A call over midnight: what was connected before midnight stays with that day;
    /// the new day counts from midnight on, and the cap is judged on the new day alone.
    @Test func midnightSplitsACall() throws {
        let w = try world(DailyCaps(minutes: 5), calendar: DailyCapsTests.calendar(23, 58))
        w.startCore()
        let connected = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        w.run(until: .zero + .seconds(240))
        #expect(w.core.state == .connected, "2 min before midnight and 2 after: under the 5 min cap each day")
        let today = try #require(w.core.todaySoFar)
        #expect(today.day == DailyCapsTests.day + 1 && today.connectedMilliseconds == 120_000)
        #expect(connected < .zero + .seconds(120), "connected before midnight")
        // The new day's cap comes 5 min after midnight.
        let paused = try #require(w.run(within: .seconds(300)) { w.core.state == .paused })
        #expect(paused == Instant.zero + .seconds(420))
    }

    /// Tokens: the provider's `response.done` usage adds up; the response that crosses
    /// the cap pauses the sessions. A restart the same day (a new core given the usage
    /// the state file kept) starts paused and starts no session until midnight; usage
    /// kept from an earlier day is not today's.
    @Test func theTokensCapHoldsAcrossARestart() throws {
        let calendar = DailyCapsTests.calendar(22, 0)
        let w = try world(DailyCaps(tokens: 1_000), route: .openai, calendar: calendar)
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.records("provider_session").contains { $0["state"]?.string == "updated" } } != nil)
        let s = try #require(w.provider.sessionOfCore[1])
        func done(_ n: Int, input: Int, output: Int) throws {
            let peer = try #require(s.peer), channel = try #require(s.channel)
            try peer.send(channel: channel, text: #"{"type":"response.done","response":{"id":"resp_\#(n)","status":"completed","output":[],"usage":{"input_tokens":\#(input),"output_tokens":\#(output)}}}"#, now: w.now)
            w.provider.drain(s)
        }
        try done(1, input: 250, output: 350)
        w.run(for: .milliseconds(100))
        #expect(w.core.todaySoFar?.tokens == 600 && w.core.state == .connected)
        try done(2, input: 150, output: 250)
        let paused = try #require(w.run(within: .seconds(1)) { w.core.state == .paused })
        #expect(w.core.capped?.contains("max-daily-tokens reached (1000 of 1000 tokens today)") == true, "\(w.core.capped ?? "none")")
        let kept = try #require(w.core.todaySoFar)
        #expect(DailyUsage.parse(kept.json) == kept)

        // The restart: the same day, an hour later on the new process's clock.
        let again = try world(DailyCaps(tokens: 1_000), route: .openai,
                              calendar: LocalCalendar(localSecondsAtZero: calendar.localSecondsAtZero + paused.nanoseconds / 1_000_000_000 + 3_600),
                              restored: DailyUsage.parse(kept.json))
        again.startCore()
        #expect(again.core.state == .paused && again.core.capped != nil)
        let midnight = LocalCalendar(localSecondsAtZero: calendar.localSecondsAtZero + paused.nanoseconds / 1_000_000_000 + 3_600)
            .start(ofDay: DailyCapsTests.day + 1)
        again.run(until: midnight - .seconds(1))
        #expect(again.records("session").isEmpty && again.requests("POST").isEmpty, "no session while capped")
        #expect(again.run(within: .seconds(10)) { again.core.state == .connected } != nil)
        #expect(again.records("session").first?["reason"]?.string == "resume")

        // Usage kept from yesterday does not hold today.
        let stale = try world(DailyCaps(tokens: 1_000), route: .openai, calendar: DailyCapsTests.calendar(day: DailyCapsTests.day + 1, 8, 0),
                              restored: kept)
        stale.startCore()
        #expect(stale.core.state == .connecting && stale.core.todaySoFar == DailyUsage(day: DailyCapsTests.day + 1))
    }

    /// Without caps the day is still counted (the status file and the metrics show it)
    /// and nothing pauses.
    @Test func withoutCapsNothingPauses() throws {
        let w = try world(DailyCaps(), calendar: DailyCapsTests.calendar(12, 0))
        w.startCore()
        let connected = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        w.run(for: .seconds(600))
        #expect(w.core.state == .connected)
        #expect(w.core.todaySoFar?.connectedMilliseconds == (w.now - connected).milliseconds)
        let status = String(decoding: w.core.statusSnapshot.json, as: UTF8.self)
        #expect(status.contains(#""today":{"date":"2026-12-04","connected_s":"#), "\(status)")
    }
}

/// journald's fields on the lines a fleet searches by (the virtual board checks them in
/// a real journal: board/vm/vboard.sh, call).
@Suite struct JournalFieldsTests {
    /// Every state change carries MESSAGE_ID, LINNET_STATE and LINNET_SESSION; every
    /// session start its reason. A rollover is found by its reason.
    @Test func stateChangesAndStartsCarryTheirFields() throws {
        var o = ProviderWorld.Options()
        o.maximumSessionAge = .seconds(30)
        let w = try ProviderWorld(o)
        w.startCore()
        _ = try #require(w.run(within: .seconds(60)) { w.core.sessionIDs.contains(2) && w.core.activeID == 2 })
        func field(_ e: (at: Instant, text: String, fields: [(String, String)]), _ k: String) -> String? { e.fields.first { $0.0 == k }?.1 }
        let states = w.journal.filter { field($0, "MESSAGE_ID") == JournalMessage.stateChanged }
        #expect(states.map { field($0, "LINNET_STATE") ?? "?" } == ["connecting", "connected"])
        #expect(states.allSatisfy { field($0, "LINNET_SESSION") == "1" })
        let starts = w.journal.filter { field($0, "MESSAGE_ID") == JournalMessage.sessionStarted }
        #expect(starts.map { "\(field($0, "LINNET_SESSION") ?? "?") \(field($0, "LINNET_REASON") ?? "?")" } == ["1 initial", "2 rollover"])
    }

}
