import Testing
import Wire
import JSON
import Signaling
@testable import Agent

/// Push-to-talk on the events channel, the OpenAI route's ephemeral key, and what the
/// status file says: the core against the in-memory provider (its scripted Realtime
/// service for OpenAI). Was CLITests' `openAIPushToTalkFlow` against aiortc, with the
/// decisions now checked here.
@Suite struct AgentCoreConversationTests {
    func types(_ messages: [String]) -> [String] {
        messages.compactMap { (try? JSONValue.parse(Array($0.utf8)))?["type"]?.string }
    }

    func openAIWorld() throws -> ProviderWorld {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.pushToTalk = true
        let w = try ProviderWorld(o)
        w.provider.onMessage = WorldProvider.realtimeScript
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.records("provider_session").contains { $0["state"]?.string == "updated" } } != nil)
        return w
    }

    /// The device token buys the ephemeral key at the token URL, and only the key goes
    /// to the calls URL and the hang-up; push-to-talk starts muted; a press unmutes and
    /// sends `input_audio_buffer.clear`; a release after a second of audio mutes and
    /// sends the commit 200 ms later (the tail), and response.create once it is
    /// committed; the transcripts come back and are what the status
    /// file shows; a tap too short to commit sends its clear and nothing else; SIGTERM
    /// hangs up.
    @Test func pushToTalkOnTheEventsChannel() throws {
        let w = try openAIWorld()
        let provider = try #require(w.provider.sessionOfCore[1])
        // The key exchange: token URL first, with the device's token, then the call.
        let token = try #require(w.requestsSent.first?.request)
        #expect(token.url.target == "/token" && token.headers["Authorization"] == "Bearer device-token")
        let call = try #require(w.requestsSent.dropFirst().first?.request)
        #expect(call.url.target == "/v1/realtime/calls" && call.headers["Authorization"] == "Bearer " + w.provider.ephemeralKey)
        #expect(w.mutes.map(\.muted) == [true], "push-to-talk starts muted")
        #expect(types(provider.messages) == ["session.update", "session.update"])
        let update = try JSONValue.parse(Array(provider.messages[0].utf8))
        #expect(update["session"]?["audio"]?["input"]?["turn_detection"] == .null)

        let mutesBefore = w.mutes.count
        w.core.talk(true, now: w.now)
        w.drive()
        #expect(w.mutes.dropFirst(mutesBefore).map(\.muted) == [false])
        #expect(w.records("ptt").last?["talking"] == .bool(true))
        w.run(for: .milliseconds(100))
        #expect(types(provider.messages) == ["session.update", "session.update", "input_audio_buffer.clear"])
        w.run(for: .seconds(1))
        let released = w.now
        w.core.talk(false, now: w.now)
        w.drive()
        // The ptt tail: the microphone stays open and the commit waits 200 ms.
        #expect(w.mutes.last?.muted == false)
        #expect(types(provider.messages) == ["session.update", "session.update", "input_audio_buffer.clear"])
        w.run(until: released + .milliseconds(200))
        #expect(w.mutes.last?.muted == true && w.mutes.last?.at == released + .milliseconds(200))
        try #require(w.run(within: .seconds(2)) { w.core.lastAssistantText != nil } != nil)
        #expect(types(provider.messages) == ["session.update", "session.update", "input_audio_buffer.clear", "input_audio_buffer.commit", "response.create"])
        #expect(w.core.lastUserText == "hello linnet")
        #expect(w.core.lastAssistantText == "Hi, this is the test provider.")
        let finals = w.records("transcript").filter { $0["final"] == .bool(true) }.compactMap { $0["text"]?.string }
        #expect(finals == ["hello linnet", "Hi, this is the test provider."])
        #expect(w.logged("user: hello linnet") && w.logged("assistant: Hi, this is the test provider."))
        #expect(w.statuses.last?.status.lastUser == "hello linnet" && w.statuses.last?.status.lastAssistant == "Hi, this is the test provider.")

        // A tap: down and up at the same instant.
        w.run(for: .seconds(1))
        w.core.talk(true, now: w.now)
        w.core.talk(false, now: w.now)
        w.drive()
        w.run(for: .milliseconds(200))
        #expect(w.records("ptt_too_short").count == 1)
        #expect(types(provider.messages) == ["session.update", "session.update", "input_audio_buffer.clear", "input_audio_buffer.commit", "response.create",
                                             "input_audio_buffer.clear"])
        w.stop()
        try #require(w.run(within: .seconds(5)) { w.exited != nil } != nil)
        #expect(w.exited?.status == .ok)
        let hangup = try #require(w.requests("POST").last?.request)
        #expect(hangup.url.target == "/v1/realtime/calls/rtc_1/hangup" && hangup.headers["Authorization"] == "Bearer " + w.provider.ephemeralKey)
        #expect(provider.endedBy == "close")
        #expect(!w.logs.contains { $0.text.contains("device-token") || $0.text.contains(w.provider.ephemeralKey) }, "no token in the log")
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// A press that sent less than the commit floor (150 ms on this route) commits
    /// nothing; one just past it commits. Counted in audio sent, not in time held: the
    /// mute gate's frames are 20 ms each.
    @Test func commitFloorIsAudioSent() throws {
        let w = try openAIWorld()
        let provider = try #require(w.provider.sessionOfCore[1])
        w.core.talk(true, now: w.now)
        w.drive()
        w.run(for: .milliseconds(139))
        w.core.talk(false, now: w.now)
        w.drive()
        w.run(for: .milliseconds(100))
        #expect(w.records("ptt_too_short").count == 1)
        #expect(!types(provider.messages).contains("input_audio_buffer.commit"))
        w.core.talk(true, now: w.now)
        w.drive()
        w.run(for: .milliseconds(161))
        w.core.talk(false, now: w.now)
        w.drive()
        w.run(for: .milliseconds(300))
        #expect(types(provider.messages).filter { $0 == "input_audio_buffer.commit" }.count == 1, "\(types(provider.messages))")
    }

    /// Voice mode: the microphone is open from the start, the button is a mute switch
    /// (a press toggles), nothing is sent on the events channel for it.
    @Test func voiceModeButtonMutes() throws {
        let w = try ProviderWorld()
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.core.state == .connected } != nil)
        w.run(for: .milliseconds(200))
        let provider = try #require(w.provider.sessionOfCore[1])
        #expect(w.mutes.map(\.muted) == [false])
        w.core.talk(true, now: w.now)
        w.core.talk(false, now: w.now)
        w.drive()
        #expect(w.mutes.map(\.muted) == [false, true])
        #expect(w.core.statusSnapshot.muted)
        w.core.toggle(now: w.now)
        w.drive()
        #expect(w.mutes.map(\.muted) == [false, true, false])
        w.run(for: .milliseconds(200))
        // Nothing configured for voice mode on WHIP: no session.update at all.
        #expect(types(provider.messages) == [])
    }

    /// The status file's fields, on the simulated clock: state and how long it has held,
    /// mute, turn detection, reconnects (every session started after the first, as the
    /// runner always counted), the session carrying audio, the round trip once RTCP
    /// measured it (10 ms each way here), and the JSON the file holds.
    @Test func statusSnapshotFields() throws {
        var o = ProviderWorld.Options()
        o.statsInterval = .seconds(1)
        let w = try ProviderWorld(o)
        w.startCore()
        let first = try #require(w.statuses.first?.status)
        #expect(first.state == .connecting && first.session == nil && first.reconnects == 0 && first.rttMilliseconds == nil)
        let up = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        w.run(until: up + .milliseconds(3_500))
        let s = w.core.statusSnapshot
        #expect(s.state == .connected && s.muted == false && s.turnDetection == "vad" && s.reconnects == 0 && s.session == 1)
        #expect(s.sinceSeconds == 3.5)
        let rtt = try #require(s.rttMilliseconds)
        #expect(rtt >= 20 && rtt < 21, "rtt \(rtt) ms")
        // Written on each state change and each stats tick.
        #expect(w.statuses.filter { $0.at > up }.count >= 3)
        let json = try JSONValue.parse(s.json)
        #expect(json["state"] == "connected" && json["since_s"]?.double == 3.5 && json["muted"] == .bool(false))
        #expect(json["turn_detection"] == "vad" && json["reconnects"]?.int == 0 && json["session"]?.int == 1)
        #expect(json["rtt_ms"]?.double == rtt && json["last_user"] == nil && s.json.last == 10)
        // The stats line: this session's figures.
        let stats = try #require(w.records("stats").last)
        #expect(stats["session"]?.int64 == 1 && (stats["packets_sent"]?.int64 ?? 0) > 100 && (stats["packets_received"]?.int64 ?? 0) > 100)
        #expect(stats["packets_lost"]?.int64 == 0 && stats["connect_ms"]?.int64 == 100, "\(stats.fields.map(\.0))")
        // A rollover or reconnect moves `session` on and counts.
        w.provider.end(try #require(w.provider.sessionOfCore[1]), by: "media crashed", goodbye: false)
        try #require(w.run(within: .seconds(10)) { w.core.state == .disconnected } != nil)
        let down = w.core.statusSnapshot
        #expect(down.state == .disconnected && down.sinceSeconds == 0 && down.session == 1)
        try #require(w.run(within: .seconds(30)) { w.core.state == .connected } != nil)
        let again = w.core.statusSnapshot
        #expect(again.session == w.core.activeID && again.session != 1 && again.reconnects == (w.sessionsStarted.count - 1))
        w.stop()
        try #require(w.run(within: .seconds(5)) { w.exited != nil } != nil)
        #expect(w.statuses.last?.status.state == .closed)
    }
}

/// The session is configured before anything else reaches it: on the OpenAI
/// route the microphone sends silence and the `send` lines wait until `session.updated`,
/// on the first session and after every switch; a barge-in empties the playback.
@Suite struct AgentCoreSessionSetupTests {
    func types(_ messages: [String]) -> [String] {
        messages.compactMap { (try? JSONValue.parse(Array($0.utf8)))?["type"]?.string }
    }

    @Test func silenceAndHeldLinesUntilSessionUpdated() throws {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.sendOnOpen = [#"{"type":"response.create","response":{"instructions":"Greet the user."}}"#]
        let w = try ProviderWorld(o)
        // The scripted service confirms the update 300 ms late.
        var updatedAt: Instant?
        w.provider.onMessage = { s, text in
            let out = WorldProvider.realtimeScript(s, text)
            if text.contains("\"session.update\"") {
                let world = w
                world.schedule(after: .milliseconds(300)) { world in
                    updatedAt = world.now
                    if let p = s.peer, let ch = s.channel { try? p.send(channel: ch, text: out[0], now: world.now); world.provider.drain(s) }
                }
                return []
            }
            return out
        }
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.records("provider_session").contains { $0["state"]?.string == "updated" } } != nil)
        let provider = try #require(w.provider.sessionOfCore[1])
        // Voice mode, yet the gate stayed closed until the update was confirmed.
        #expect(w.mutes.map(\.muted) == [true, false])
        let opened = try #require(w.mutes.last?.at)
        #expect(opened == updatedAt.map { $0 + .milliseconds(10) }, "opens when session.updated arrives (10 ms on the way)")
        w.run(for: .milliseconds(100))
        #expect(types(provider.messages) == ["session.update", "response.create"], "the send line only after session.updated")
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    @Test func bargeInFlushesPlayback() throws {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.pushToTalk = true
        let w = try ProviderWorld(o)
        w.provider.onMessage = { s, text in
            // A response that goes on speaking: created and started, never done.
            if text.contains("\"response.create\"") {
                return [#"{"type":"response.created","response":{"id":"resp_1","status":"in_progress","output":[]}}"#,
                        #"{"type":"output_audio_buffer.started","response_id":"resp_1"}"#]
            }
            return WorldProvider.realtimeScript(s, text)
        }
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.records("provider_session").contains { $0["state"]?.string == "updated" } } != nil)
        w.core.talk(true, now: w.now)
        w.drive()
        w.run(for: .milliseconds(500))
        w.core.talk(false, now: w.now)
        w.drive()
        try #require(w.run(within: .seconds(2)) { w.core.assistantSpeaking } != nil)
        #expect(w.flushes.isEmpty)
        w.core.talk(true, now: w.now)
        w.drive()
        #expect(w.flushes.map(\.session) == [1] && w.flushes.first?.at == w.now)
    }
}

/// Rollover as a user lives it: the button is held across the planned
/// switch; the utterance is answered on the old session, the switch waits for the
/// quiet moment after it, and the new session is given the earlier turns
/// (`conversation.item.create`) before the microphone opens.
@Suite struct AgentCoreRolloverMemoryTests {
    func types(_ messages: [String]) -> [String] {
        messages.compactMap { (try? JSONValue.parse(Array($0.utf8)))?["type"]?.string }
    }

    @Test func buttonHeldAcrossThePlannedSwitch() throws {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.pushToTalk = true
        o.maximumSessionAge = .seconds(120)  // rollover planned at 108 s, forced at 114 s
        let w = try ProviderWorld(o)
        w.provider.onMessage = WorldProvider.realtimeScript
        w.startCore()
        let up = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        try #require(w.run(within: .seconds(5)) { w.records("provider_session").contains { $0["state"]?.string == "updated" } } != nil)

        // A first turn.
        w.run(until: up + .seconds(2))
        w.core.talk(true, now: w.now)
        w.run(for: .seconds(1))
        w.core.talk(false, now: w.now)
        try #require(w.run(within: .seconds(2)) { w.core.lastAssistantText != nil } != nil)

        // The second turn is held from 105 s to 111 s: the candidate connects meanwhile.
        w.run(until: up + .seconds(105))
        w.core.talk(true, now: w.now)
        w.drive()
        try #require(w.run(within: .seconds(5)) { w.sessionsStarted.count == 2 } != nil)
        #expect(w.sessionsStarted.last?.reason == "rollover")
        w.run(until: up + .seconds(111))
        #expect(w.provider.sessionOfCore[2]?.everConnected == true, "the new session is up")
        #expect(w.audioSession == 1, "no switch while the button is held")
        w.core.talk(false, now: w.now)
        w.drive()
        let old = try #require(w.provider.sessionOfCore[1])
        let switched = try #require(w.run(within: .seconds(3)) { w.audioSession == 2 })
        #expect(switched < up + .seconds(114), "a quiet moment came before the forced switch")
        // The utterance went to the old session and was answered there, before the switch.
        #expect(types(old.messages).filter { $0 == "response.create" }.count == 2)
        let finals = w.records("transcript").filter { $0["final"] == .bool(true) && $0.at <= switched }.count
        #expect(finals == 4, "two user lines and two answers before the switch")

        // The new session learns the earlier turns before anything else.
        try #require(w.run(within: .seconds(2)) { (w.provider.sessionOfCore[2]?.messages.count ?? 0) >= 6 } != nil)
        let fresh = try #require(w.provider.sessionOfCore[2])
        #expect(types(fresh.messages).prefix(6) == ["session.update", "session.update", "conversation.item.create", "conversation.item.create",
                                                    "conversation.item.create", "conversation.item.create"])
        let items = try fresh.messages.dropFirst(2).prefix(4).map { try JSONValue.parse(Array($0.utf8))["item"] }
        #expect(items.map { $0?["role"]?.string } == ["user", "assistant", "user", "assistant"])
        #expect(items.map { $0?["content"]?[0]?["text"]?.string } == ["hello linnet", "Hi, this is the test provider.",
                                                                      "hello linnet", "Hi, this is the test provider."])
        #expect(w.problems.isEmpty, "\(w.problems)")
    }
}

@Suite struct AgentCoreSessionExpiryTests {
    /// The provider's `session.expires_at` (30 minutes here, Azure's limit) plans the
    /// rollover, though `max-session-minutes` is the default 60: the next session is
    /// started five minutes before it.
    @Test func rolloverPlannedFromExpiresAt() throws {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.uplinkEvery = nil
        o.keepHistory = true
        let w = try ProviderWorld(o)
        var expires: Int64 = 0
        w.provider.onMessage = { s, text in
            var out = WorldProvider.realtimeScript(s, text)
            if text.contains("\"session.update\""), expires == 0 {
                expires = w.wallClock + 30 * 60
                out.insert(#"{"type":"session.created","session":{"type":"realtime","expires_at":\#(expires)}}"#, at: 0)
            }
            return out
        }
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.records("session_expires").count == 1 } != nil)
        let told = w.now
        try #require(w.run(within: .seconds(30 * 60)) { w.sessionsStarted.count == 2 } != nil)
        let started = try #require(w.sessionsStarted.last)
        #expect(started.reason == "rollover")
        // 25 minutes after the event (to the second: the wall clock is whole seconds).
        let lead = started.at - told
        #expect(lead >= .seconds(25 * 60 - 1) && lead <= .seconds(25 * 60), "\(lead)")
    }

    /// A world whose provider says `session.expires_at` = `expires(now)` (the provider's
    /// Unix seconds) in every session's `session.created`, and whose device clock is
    /// `skew` seconds off; runs `minutes` of simulated time and gives the sessions
    /// started.
    func storm(skew: Int64 = 0, minutes: Int64, _ expires: @escaping (Int64) -> Int64) throws -> (ProviderWorld, [String]) {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.uplinkEvery = nil
        o.keepHistory = true
        o.deviceClockOffset = skew
        let w = try ProviderWorld(o)
        w.provider.onMessage = { s, text in
            var out = WorldProvider.realtimeScript(s, text)
            if text.contains("\"session.update\""), !s.messages.contains(where: { $0.contains("session.created") }) {
                out.insert(#"{"type":"session.created","session":{"type":"realtime","expires_at":\#(expires(w.wallClock))}}"#, at: 0)
            }
            return out
        }
        w.startCore()
        w.run(for: .seconds(minutes * 60))
        return (w, w.sessionsStarted.map(\.reason))
    }

    /// `expires_at` in the past, in year 9999, at Int64.max: each would have started a
    /// session every few seconds (37–38 in 20 s); the value is set aside, said once per
    /// session, and the configured limit holds: one session in 10 minutes.
    @Test(arguments: [Int64(-100), 253_402_300_799, Int64.max])
    func absurdExpiriesStartNoStorm(_ value: Int64) throws {
        let (w, sessions) = try storm(minutes: 10) { now in value < 0 ? now + value : value }
        #expect(sessions == ["initial"], "\(sessions)")
        #expect(w.logs.contains { $0.text.contains("by its own clock: set aside") })
    }

    /// A device clock one hour fast (an RTC kept in local time) made every session look
    /// expired: 224 sessions in 11 s. The provider's own clock (its `Date`) places
    /// `expires_at`: the rollover comes 25 minutes in, as with a right clock; one an
    /// hour slow no longer lets the provider's limit pass the configured one.
    @Test(arguments: [Int64(3_600), -3_600])
    func aSkewedDeviceClockDoesNotMoveTheRollover(_ skew: Int64) throws {
        let (_, sessions) = try storm(skew: skew, minutes: 28) { now in now + 30 * 60 }
        #expect(sessions == ["initial", "rollover"], "\(sessions)")
    }

    /// A provider that says every session ends 10 s from now: a rollover no sooner than
    /// a minute into each session, not one every few seconds.
    @Test func rolloversHaveAFloor() throws {
        let (_, sessions) = try storm(minutes: 5) { now in now + 10 }
        #expect(sessions.count >= 3 && sessions.count <= 6, "\(sessions.count) sessions in 5 minutes: \(sessions)")
    }
}
