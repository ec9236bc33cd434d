import Testing
import Wire
import JSON
import Signaling
@testable import Agent

/// The wake word's turn: the pure machine on a manual clock, then the core against the
/// in-memory OpenAI provider (what is sent on the events channel, what the mute gate is
/// told, the earcon).
@Suite struct WakeTurnTests {
    let t0 = Instant.zero + .seconds(100)

    @Test func earconThenOpenThenCloseOnSilence() {
        var w = WakeTurn()
        #expect(w.deadline == nil)
        #expect(w.wake(now: t0) == .earcon)
        #expect(!w.isOpen && w.deadline == t0 + .milliseconds(200))
        // The microphone opens only once the earcon has played.
        #expect(w.timeout(now: t0 + .milliseconds(199)) == nil)
        #expect(w.timeout(now: t0 + .milliseconds(200)) == .open)
        #expect(w.isOpen)
        let open = t0 + .milliseconds(200)
        // Before any voice the turn waits `noSpeech`.
        #expect(w.deadline == open + .seconds(6))
        #expect(w.voice(heldFor: .zero, now: open + .seconds(1)) == nil)
        // Speech, with a short pause inside it (under `endSilence`): the turn goes on.
        #expect(w.voice(heldFor: .milliseconds(10), now: open + .seconds(1)) == nil)
        #expect(w.voice(heldFor: .zero, now: open + .milliseconds(1500)) == nil)
        #expect(w.voice(heldFor: .milliseconds(10), now: open + .milliseconds(1800)) == nil)
        #expect(w.deadline == open + .milliseconds(2700))
        #expect(w.voice(heldFor: .zero, now: open + .milliseconds(2699)) == nil)
        #expect(w.voice(heldFor: .zero, now: open + .milliseconds(2700)) == .close)
        #expect(w.phase == .idle && w.closed == 1 && w.wakes == 1)
    }

    @Test func silenceAbandonsAndNoiseIsCutAtTheLongest() {
        var w = WakeTurn()
        _ = w.wake(now: t0)
        _ = w.timeout(now: t0 + .milliseconds(200))
        #expect(w.timeout(now: t0 + .milliseconds(6199)) == nil)
        #expect(w.timeout(now: t0 + .milliseconds(6200)) == .abandon)
        #expect(w.abandoned == 1 && !w.isActive)
        // A room that never falls silent (a television): cut at `longest`, as a turn.
        _ = w.wake(now: t0 + .seconds(10))
        let open = t0 + .seconds(10) + .milliseconds(200)
        _ = w.timeout(now: open)
        var t = open
        var ended: WakeAction? = nil
        while ended == nil && t < open + .seconds(30) {
            t = t + .milliseconds(10)
            ended = w.voice(heldFor: .milliseconds(10), now: t) ?? w.timeout(now: t)
        }
        #expect(ended == .close && t == open + .seconds(20) && w.cutLong == 1)
        // The button takes over a turn.
        _ = w.wake(now: t + .seconds(1))
        w.cancel()
        #expect(w.deadline == nil && w.timeout(now: t + .seconds(60)) == nil)
    }

    func types(_ messages: [String]) -> [String] {
        messages.compactMap { (try? JSONValue.parse(Array($0.utf8)))?["type"]?.string }
    }

    func wakeWorld(script: @escaping (WorldProvider.Session, String) -> [String] = WorldProvider.realtimeScript) throws -> ProviderWorld {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.pushToTalk = true
        o.configure = { $0.wakeWord = true }
        let w = try ProviderWorld(o)
        w.provider.onMessage = script
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.records("provider_session").contains { $0["state"]?.string == "updated" } } != nil)
        return w
    }

    /// Speaks for `speech`, the flag on every 20 ms frame, then silent frames.
    func speak(_ w: ProviderWorld, for speech: Duration) {
        let start = w.now
        var held = Duration.zero
        while w.now < start + speech {
            held = held + .milliseconds(20)
            w.core.wakeVoice(heldFor: held, now: w.now)
            w.drive()
            w.run(for: .milliseconds(20))
        }
    }

    func silent(_ w: ProviderWorld, for d: Duration) {
        let start = w.now
        while w.now < start + d {
            w.core.wakeVoice(heldFor: .zero, now: w.now)
            w.drive()
            w.run(for: .milliseconds(20))
        }
    }

    /// Wake, earcon at once, the microphone opened 200 ms later with a clear (the turn
    /// starts empty), the user's words, and 900 ms of silence end the turn as a release
    /// does: commit, response.create, the answer.
    @Test func aWakeMakesATurnThatEndsOnSilence() throws {
        let w = try wakeWorld()
        let provider = try #require(w.provider.sessionOfCore[1])
        #expect(w.mutes.map(\.muted) == [true], "muted until a wake")
        let woke = w.now
        w.core.wake(score: 0.97, now: w.now)
        w.drive()
        #expect(w.earcons == [woke])
        #expect(w.records("wake").count == 1)
        #expect(w.mutes.last?.muted == true, "the earcon is not sent")
        w.run(for: .milliseconds(199))
        #expect(w.mutes.last?.muted == true)
        w.run(for: .milliseconds(1))
        #expect(w.mutes.last?.muted == false && w.mutes.last?.at == woke + .milliseconds(200))
        w.run(for: .milliseconds(40))
        #expect(types(provider.messages).suffix(1) == ["input_audio_buffer.clear"])
        speak(w, for: .seconds(1))
        silent(w, for: .milliseconds(880))
        #expect(!types(provider.messages).contains("input_audio_buffer.commit"))
        silent(w, for: .milliseconds(400))
        try #require(w.run(within: .seconds(2)) { w.core.lastAssistantText != nil } != nil)
        #expect(types(provider.messages).suffix(3) == ["input_audio_buffer.clear", "input_audio_buffer.commit", "response.create"])
        #expect(w.mutes.last?.muted == true)
        #expect(w.records("wake_turn").map { $0["spoke"] } == [nil, .bool(true)])
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// Nobody speaks after the wake: nothing is committed, the buffer is cleared, the
    /// microphone closes, and no answer is asked for.
    @Test func aWakeNobodySpeaksAfterIsDropped() throws {
        let w = try wakeWorld()
        let provider = try #require(w.provider.sessionOfCore[1])
        w.core.wake(score: 0.9, now: w.now)
        w.drive()
        silent(w, for: .milliseconds(6300))
        #expect(w.mutes.last?.muted == true)
        #expect(types(provider.messages).suffix(2) == ["input_audio_buffer.clear", "input_audio_buffer.clear"])
        #expect(!types(provider.messages).contains("input_audio_buffer.commit"))
        #expect(w.records("wake_turn").last?["spoke"] == .bool(false))
    }

    /// The user says the word over the assistant's reply: the reply is cut at the wake
    /// (its playback flushed), before the earcon has played, and a new turn follows.
    @Test func aWakeOverTheReplyCutsIt() throws {
        let w = try wakeWorld { s, text in
            if text.contains("\"response.create\"") {
                return [#"{"type":"response.created","response":{"id":"resp_1","status":"in_progress","output":[]}}"#,
                        #"{"type":"output_audio_buffer.started","response_id":"resp_1"}"#]
            }
            return WorldProvider.realtimeScript(s, text)
        }
        let provider = try #require(w.provider.sessionOfCore[1])
        w.core.wake(score: 0.9, now: w.now)
        w.drive()
        w.run(for: .milliseconds(200))
        speak(w, for: .milliseconds(600))
        silent(w, for: .seconds(1))
        try #require(w.run(within: .seconds(2)) { w.core.assistantSpeaking } != nil)
        #expect(w.flushes.isEmpty)
        let cancelsBefore = types(provider.messages).filter { $0 == "response.cancel" }.count
        w.core.wake(score: 0.95, now: w.now)
        w.drive()
        #expect(w.flushes.map(\.session) == [1] && w.flushes.first?.at == w.now)
        w.run(for: .milliseconds(40))
        #expect(types(provider.messages).filter { $0 == "response.cancel" }.count == cancelsBefore + 1)
        #expect(w.records("wake").last?["over_assistant"] == .bool(true))
        #expect(w.earcons.count == 2)
    }

    /// The button still works beside the wake word, and a press during a wake turn owns
    /// it: the wake turn's silence no longer ends it.
    @Test func theButtonTakesOverAWakeTurn() throws {
        let w = try wakeWorld()
        let provider = try #require(w.provider.sessionOfCore[1])
        w.core.wake(score: 0.9, now: w.now)
        w.drive()
        w.run(for: .milliseconds(200))
        #expect(w.core.wakeTurn.isOpen)
        w.core.talk(true, now: w.now)
        w.drive()
        #expect(!w.core.wakeTurn.isActive)
        silent(w, for: .seconds(7))
        #expect(w.mutes.last?.muted == false, "held: still talking")
        #expect(!types(provider.messages).contains("input_audio_buffer.commit"))
        w.core.talk(false, now: w.now)
        w.drive()
        try #require(w.run(within: .seconds(2)) { types(provider.messages).contains("input_audio_buffer.commit") } != nil)
    }
}
