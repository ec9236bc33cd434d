import Testing
import Wire
import Peer
@testable import Agent

/// Voice mode without echo cancellation (`duplex = half`): while the assistant speaks
/// (output_audio_buffer.started … stopped), every frame the provider receives is silence,
/// so the assistant's own voice, heard back by the microphone, never reaches it as the
/// user's; the mute gate is told to close and open again. Full duplex (with echo
/// cancellation) keeps sending the microphone: the control that shows the test can fail.
@Suite struct HalfDuplexTests {
    func speakingWindow(halfDuplex: Bool, waitForCanceller: Bool = false, converged: Bool = false) throws -> (during: [Int], after: [Int], mutes: [Bool]) {
        var o = ProviderWorld.Options()
        o.configure = {
            $0.halfDuplex = halfDuplex
            $0.waitForCanceller = waitForCanceller
        }
        let w = try ProviderWorld(o)
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.core.state == .connected } != nil)
        if converged { w.core.echoCanceller(converged: true, now: w.now) }
        w.run(for: .milliseconds(300))
        let provider = try #require(w.provider.sessionOfCore[1])
        let peer = try #require(provider.peer), channel = try #require(provider.channel)
        try peer.send(channel: channel, text: #"{"type": "output_audio_buffer.started", "response_id": "resp_1"}"#, now: w.now)
        w.run(for: .milliseconds(100))
        #expect(w.core.assistantSpeaking)
        let start = w.now
        w.run(for: .seconds(1))
        let end = w.now
        try peer.send(channel: channel, text: #"{"type": "output_audio_buffer.stopped", "response_id": "resp_1"}"#, now: w.now)
        w.run(for: .milliseconds(500))
        #expect(!w.core.assistantSpeaking)
        // Frames are sent 20 ms apart and arrive 10 ms later: skip the edges.
        let during = provider.audio.filter { $0.at > start + .milliseconds(60) && $0.at < end }.map(\.index)
        let after = provider.audio.filter { $0.at > end + .milliseconds(100) }.map(\.index)
        return (during, after, w.mutes.map(\.muted))
    }

    @Test func halfDuplexSendsSilenceWhileTheAssistantSpeaks() throws {
        let r = try speakingWindow(halfDuplex: true)
        #expect(r.during.count >= 40, "\(r.during.count) frames")
        #expect(r.during.allSatisfy { $0 == 0 }, "\(r.during)")
        #expect(!r.after.isEmpty && r.after.allSatisfy { $0 > 0 }, "\(r.after)")
        #expect(r.mutes == [false, true, false])
    }

    /// Full duplex behind an echo canceller that has not converged yet: half duplex
    /// until it has (its echo would pass for the user); once it has, the microphone
    /// stays open while the assistant speaks.
    @Test func fullDuplexWaitsForTheCancellerToConverge() throws {
        let before = try speakingWindow(halfDuplex: false, waitForCanceller: true)
        #expect(before.during.count >= 40 && before.during.allSatisfy { $0 == 0 }, "\(before.during)")
        #expect(before.mutes == [false, true, false])
        let after = try speakingWindow(halfDuplex: false, waitForCanceller: true, converged: true)
        #expect(after.during.count >= 40 && after.during.allSatisfy { $0 > 0 }, "\(after.during)")
        #expect(after.mutes == [false])
    }

    @Test func fullDuplexKeepsTheMicrophoneOpen() throws {
        let r = try speakingWindow(halfDuplex: false)
        #expect(r.during.count >= 40 && r.during.allSatisfy { $0 > 0 }, "\(r.during)")
        #expect(r.mutes == [false])
    }
}
