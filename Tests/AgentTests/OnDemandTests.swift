import Testing
import Wire
import JSON
@testable import Agent

/// Sessions on demand (`session = on-demand`) on ProviderWorld's manual clock, with the
/// scripted Realtime service: the world's uplink frames carry their capture index, so
/// what the provider received is compared frame by frame with what the microphone
/// captured from the instant of the press.
@Suite struct OnDemandTests {
    /// The OpenAI route with push-to-talk and the scripted service; sessions on demand
    /// unless `onDemand` is false (an open session, `session = always`).
    func world(onDemand: Bool = true, idle: Duration = .seconds(30)) throws -> ProviderWorld {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.pushToTalk = true
        o.configure = {
            $0.onDemand = onDemand
            $0.idleTimeout = idle
        }
        let w = try ProviderWorld(o)
        w.provider.onMessage = WorldProvider.realtimeScript
        return w
    }

    /// Presses now, releases 1.5 s later, and waits for the reply; returns the capture
    /// index of the press's first frame and of the last frame before the release.
    func pressAndHold(_ w: ProviderWorld) throws -> (first: Int, last: Int) {
        let firstIndex = w.frameIndex
        w.core.talk(true, now: w.now)
        w.drive()
        #expect(w.core.state == .connecting, "connecting at once")
        var lastIndex = 0
        w.schedule(after: .milliseconds(1_500)) { w in
            lastIndex = w.frameIndex - 1
            w.core.talk(false, now: w.now)
            w.drive()
        }
        _ = try #require(w.run(within: .seconds(10)) { w.core.lastAssistantText != nil })
        return (firstIndex, lastIndex)
    }

    /// Every frame from the press reached the session, in order, none lost, the press's
    /// own first and through the release; the turn was cleared before it, committed once
    /// after the last held frame arrived, and one response asked for. The messages'
    /// types are returned.
    @discardableResult
    func expectTheWholePress(_ s: WorldProvider.Session, first firstIndex: Int, last lastIndex: Int) throws -> [String] {
        let fromPress = Array(s.audio.map(\.index).drop { $0 < firstIndex })
        #expect(fromPress.first == firstIndex, "the press's own frame first: \(fromPress.prefix(3))")
        #expect(fromPress == Array(firstIndex..<(firstIndex + fromPress.count)), "in order, none lost")
        #expect(fromPress.count > lastIndex - firstIndex, "through the release: \(fromPress.count) frames, \(lastIndex - firstIndex + 1) held")
        let types = s.messages.compactMap(type)
        let commits = types.indices.filter { types[$0] == "input_audio_buffer.commit" }
        #expect(commits.count == 1 && types.filter { $0 == "response.create" }.count == 1, "\(types)")
        let clear = try #require(types.firstIndex(of: "input_audio_buffer.clear"))
        let commit = try #require(commits.first)
        #expect(clear < commit)
        let lastHeld = try #require(s.audio.first { $0.index == lastIndex })
        #expect(s.messageTimes[commit] > lastHeld.at, "committed after the release's last frame arrived")
        return types
    }

    func type(_ text: String) -> String? { (try? JSONValue.parse(Array(text.utf8)))?["type"]?.string }

    /// An open session (`session = always`) pressed before it can take a turn: at the
    /// start, while it connects and before its data channel is configured (under 10 %
    /// loss the duplex judge saw the channel open 3 s after the media). The press's
    /// audio is kept and sent once the conversation is configured, as on demand: every
    /// frame from the press reaches the provider in order, the turn is committed once
    /// after the last, and it is answered. Before, the microphone was shut until then and
    /// the press and its commit went nowhere: the turn and its words were lost.
    @Test func aPressBeforeTheSessionIsReadyIsKept() throws {
        let w = try world(onDemand: false)
        w.startCore()
        let held = try pressAndHold(w)
        try expectTheWholePress(try #require(w.provider.sessionOfCore[1]), first: held.first, last: held.last)
        #expect(w.records("press_kept").count == 1)
    }

    /// A kept press whose session does not come (the provider down) is not acted on
    /// later: 10 s after the release it is dropped and said (`press_dropped`, a
    /// warning), and the session that comes once the provider is back gets no commit
    /// and gives no reply. "Open the door" a minute late is worse than a lost request.
    @Test func aKeptPressIsDroppedWhenNoSessionTakesIt() throws {
        let w = try world(onDemand: false)
        w.provider.kill()
        w.startCore()
        w.core.talk(true, now: w.now)
        w.drive()
        w.run(for: .seconds(1))
        let released = w.now
        w.core.talk(false, now: w.now)
        w.drive()
        let dropped = try #require(w.run(within: .seconds(30)) { !w.records("press_dropped").isEmpty })
        #expect(dropped - released > AgentCore.keptPressLimit && dropped - released < AgentCore.keptPressLimit + .milliseconds(100))
        w.provider.revive()
        _ = try #require(w.run(within: .seconds(120)) { w.core.state == .connected && w.core.conversation.isConfigured })
        w.run(for: .seconds(5))
        let types = w.provider.sessions.values.flatMap { $0.messages.compactMap(type) }
        #expect(!types.contains("input_audio_buffer.commit") && !types.contains("response.create"), "\(types)")
        #expect(w.core.lastAssistantText == nil)
    }

    /// No session until a press; the press shows `connecting` at once; every frame
    /// captured from the press on reaches the provider, in order, none lost, the first
    /// one being the press's own; the turn is cleared before it and committed after its
    /// last frame; the reply comes; idle-seconds later the session is closed, and the
    /// next press starts another.
    @Test func everyFrameFromThePressReachesTheProvider() throws {
        let w = try world()
        w.startCore()
        w.run(for: .seconds(10))
        #expect(w.core.state == .paused && w.requests("POST").isEmpty, "no session while nobody talks")
        let pressedAt = w.now
        let held = try pressAndHold(w)
        let s = try #require(w.provider.sessionOfCore[1])
        try expectTheWholePress(s, first: held.first, last: held.last)
        // The wait: the press's first packet went when the session was configured.
        let waited = try #require(w.core.pressToFirstPacket)
        let firstArrived = try #require(s.audio.first { $0.index == held.first }).at
        #expect(firstArrived - pressedAt >= waited && firstArrived - pressedAt <= waited + .milliseconds(30))
        #expect(w.records("session").first?["reason"]?.string == "demand")
        print("on demand (world): press → first packet sent \(waited.milliseconds) ms, arrived \((firstArrived - pressedAt).milliseconds) ms; every frame from the press, none lost")

        // Idle: closed 30 s after the last speech either way; back to paused.
        let paused = try #require(w.run(within: .seconds(60)) { w.core.state == .paused })
        #expect(w.core.statusSnapshot.problem == nil && w.core.capped == nil)
        #expect(paused - pressedAt > .seconds(30) && paused - pressedAt < .seconds(40), "\(w.seconds(paused - pressedAt)) s")
        _ = w.run(within: .seconds(10)) { s.endedBy != nil && w.core.sessionIDs.isEmpty }
        #expect(s.endedBy == "close", "the provider's session was closed: \(s.endedBy ?? "not ended")")
        // A new press, a new session.
        w.core.talk(true, now: w.now)
        w.drive()
        _ = try #require(w.run(within: .seconds(10)) { w.core.state == .connected })
        #expect(w.core.sessionStarts.demand == 2)
    }

    /// A press and release shorter than the connection: the whole utterance waits in the
    /// backlog, and the commit follows it once it is out.
    @Test func aReleaseBeforeTheConnectionCommitsAfterTheBacklog() throws {
        let w = try world()
        w.startCore()
        w.run(for: .seconds(1))
        let firstIndex = w.frameIndex
        w.core.talk(true, now: w.now)
        w.drive()
        w.run(for: .milliseconds(100))
        let lastIndex = w.frameIndex - 1
        #expect(w.core.pressToFirstPacket == nil, "released before the session took the first frame")
        w.core.talk(false, now: w.now)
        w.drive()
        _ = try #require(w.run(within: .seconds(10)) { w.core.lastAssistantText != nil })
        let s = try #require(w.provider.sessionOfCore[1])
        let fromPress = s.audio.map(\.index).drop { $0 < firstIndex }
        #expect(Array(fromPress.prefix(lastIndex - firstIndex + 1)) == Array(firstIndex...lastIndex))
        let types = s.messages.compactMap(type)
        #expect(types.filter { $0 == "input_audio_buffer.commit" }.count == 1 && types.contains("response.create"), "\(types)")
    }
}
