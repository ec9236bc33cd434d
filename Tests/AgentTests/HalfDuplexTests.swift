import Testing
import Wire
import Peer
import Settings
@testable import Agent

/// When voice mode holds the microphone (`AgentSettings.micHold`): while the assistant
/// speaks (output_audio_buffer.started … stopped) with `duplex = half`, every frame the
/// provider receives is silence, so the assistant's own voice, heard back by the
/// microphone, never reaches it as the user's. Behind an echo canceller only while the
/// canceller measures its echo uncancelled, whatever the provider says; with no echo
/// the microphone stays open from the first word. Never: the control that shows the
/// test can fail.
@Suite struct HalfDuplexTests {
    /// - echo: what the canceller reports while the assistant speaks (nil: nothing).
    func speakingWindow(_ hold: MicHold, echo: Bool? = nil) throws -> (during: [Int], after: [Int], mutes: [Bool]) {
        var o = ProviderWorld.Options()
        o.configure = { $0.micHold = hold }
        let w = try ProviderWorld(o)
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.core.state == .connected } != nil)
        w.echoAudible = false
        w.run(for: .milliseconds(300))
        let provider = try #require(w.provider.sessionOfCore[1])
        let peer = try #require(provider.peer), channel = try #require(provider.channel)
        try peer.send(channel: channel, text: #"{"type": "output_audio_buffer.started", "response_id": "resp_1"}"#, now: w.now)
        w.echoAudible = echo ?? false
        w.run(for: .milliseconds(100))
        #expect(w.core.assistantSpeaking)
        let start = w.now
        w.run(for: .seconds(1))
        let end = w.now
        try peer.send(channel: channel, text: #"{"type": "output_audio_buffer.stopped", "response_id": "resp_1"}"#, now: w.now)
        // The room's echo dies away after the speaker stops: the canceller says so.
        w.echoAudible = false
        w.run(for: .milliseconds(500))
        #expect(!w.core.assistantSpeaking)
        // Frames are sent 20 ms apart and arrive 10 ms later: skip the edges.
        let during = provider.audio.filter { $0.at > start + .milliseconds(60) && $0.at < end }.map(\.index)
        let after = provider.audio.filter { $0.at > end + .milliseconds(100) }.map(\.index)
        return (during, after, w.mutes.map(\.muted))
    }

    @Test func halfDuplexSendsSilenceWhileTheAssistantSpeaks() throws {
        let r = try speakingWindow(.whileAssistantSpeaks)
        #expect(r.during.count >= 40, "\(r.during.count) frames")
        #expect(r.during.allSatisfy { $0 == 0 }, "\(r.during)")
        #expect(!r.after.isEmpty && r.after.allSatisfy { $0 > 0 }, "\(r.after)")
        #expect(r.mutes == [false, true, false])
    }

    /// Behind the canceller: held while it measures echo it does not cancel, open while
    /// it measures none (no echo at all, or cancelled), whatever the provider's events.
    @Test func theMeasuredEchoHoldsTheMicrophone() throws {
        let audible = try speakingWindow(.whileEchoAudible, echo: true)
        #expect(audible.during.count >= 40 && audible.during.allSatisfy { $0 == 0 }, "\(audible.during)")
        #expect(!audible.after.isEmpty && audible.after.allSatisfy { $0 > 0 }, "\(audible.after)")
        #expect(audible.mutes == [false, true, false])
        let none = try speakingWindow(.whileEchoAudible, echo: false)
        #expect(none.during.count >= 40 && none.during.allSatisfy { $0 > 0 }, "\(none.during)")
        #expect(none.mutes == [false])
    }

    /// The hold follows the echo, not the provider: echo measured after the provider
    /// said it stopped (the speaker's buffer, the room's tail) still holds, and the
    /// microphone opens the moment the echo is gone, not at a later event.
    @Test func theHoldEndsWithTheEchoNotTheEvents() throws {
        var o = ProviderWorld.Options()
        o.configure = { $0.micHold = .whileEchoAudible }
        let w = try ProviderWorld(o)
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.core.state == .connected } != nil)
        w.echoAudible = true
        w.run(for: .milliseconds(400))
        #expect(w.core.micClosed, "echo with no assistant event: held")
        w.echoAudible = false
        let opened = try #require(w.run(within: .milliseconds(60)) { !w.core.micClosed })
        #expect(opened - w.now <= .milliseconds(20))
        #expect(w.mutes.map(\.muted) == [false, true, false])
    }

    @Test func neverKeepsTheMicrophoneOpen() throws {
        let r = try speakingWindow(.never, echo: true)
        #expect(r.during.count >= 40 && r.during.allSatisfy { $0 > 0 }, "\(r.during)")
        #expect(r.mutes == [false])
    }
}
