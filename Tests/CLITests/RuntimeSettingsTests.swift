import Testing
@testable import linnet
@testable import Runtime
import Agent
import Settings
import Signaling
import Wire

/// The agent-core tests (AgentTests/ProviderWorld.swift) run the core with the settings
/// `linnet run` gives it; this pins the runtime to the same values, so a change here is
/// a change there too (and the timing facts asserted there still describe the binary).
@Suite struct RuntimeSettingsTests {
    @Test func theCoreTestsRunWithTheRuntimesSettings() throws {
        let whip = Route.whip(try HTTPURL("https://provider.test/whip"))
        var config = Config()
        config.maxSessionSeconds = 600
        let s = AgentSettings(config: config, route: whip, token: "t", stun: nil, sendOnOpen: [])
        // A vanished provider noticed within 3 s; no false `disconnected` at 1 % loss.
        #expect(s.peer.ice.silenceProbe == .milliseconds(1000))
        #expect(s.peer.ice.disconnectedTimeout == .milliseconds(2000))
        #expect(s.policy.iceRestart && s.policy.maximumSessionAge == .seconds(600))
        #expect(s.policy == {
            var p = SupervisorPolicy()
            p.iceRestart = true
            p.maximumSessionAge = .seconds(600)
            return p
        }())
        #expect(s.realtime.minimumCommitMilliseconds == 150)
        #expect(s.realtime.pttTailMilliseconds == 200 && s.carryTurns == 20)
        #expect(s.eventsChannel == "oai-events")
        #expect(s.gatherTimeout == .seconds(2) && s.offerTimeout == .seconds(10) && s.closeTimeout == .seconds(3) && s.restartTimeout == .seconds(5))
        let openai = AgentSettings(config: Config(), route: .openai(calls: try HTTPURL("https://api.test/v1/realtime/calls"),
                                                                       tokenURL: try HTTPURL("https://backend.test/token")),
                                      token: "t", stun: nil, sendOnOpen: [])
        #expect(openai.realtime.transcriptionModel == "gpt-4o-mini-transcribe")
        #expect(!openai.policy.iceRestart)
    }

    /// Linnet's own barge-in is on in voice mode wherever its voice flag hears the user
    /// and not the assistant: behind the echo canceller, or with no air between speaker
    /// and microphone (files); `barge-in-ms` 200 by default, 0 turns it off.
    @Test func localBargeInNeedsVoiceModeAndAFlagThatHearsTheUser() throws {
        let whip = Route.whip(try HTTPURL("https://provider.test/whip"))
        func bargeIn(_ change: (inout Config) -> Void) -> Duration? {
            var c = Config()
            change(&c)
            return AgentSettings(config: c, route: whip, token: "t", stun: nil, sendOnOpen: []).localBargeIn
        }
        #expect(Config().bargeInMS == 100)
        // The defaults: a speaker and a microphone, the canceller on, the flag on.
        #expect(bargeIn { _ in } == .milliseconds(100))
        #expect(bargeIn { $0.bargeInMS = 350 } == .milliseconds(350))
        #expect(bargeIn { $0.bargeInMS = 0 } == nil)
        #expect(bargeIn { $0.voiceFlag = false } == nil)
        // Files: nothing the speaker plays reaches the microphone.
        #expect(bargeIn { $0.input = "in.wav"; $0.output = "out.wav" } == .milliseconds(100))
        #expect(bargeIn { $0.aec = false } == nil, "a speaker without a canceller: the flag hears the assistant")
        #expect(bargeIn { $0.aec = false; $0.duplex = .full } == nil, "full duplex without a canceller hears itself")
        #expect(bargeIn { $0.duplex = .half } == nil)
        #expect(bargeIn { $0.turnDetection = .ptt } == nil)
    }

    /// What holds the microphone in voice mode: the measured echo behind a canceller,
    /// the whole reply with a speaker and no canceller, nothing with files.
    @Test func micHoldFollowsTheConfig() throws {
        let whip = Route.whip(try HTTPURL("https://provider.test/whip"))
        func hold(_ change: (inout Config) -> Void) -> MicHold {
            var c = Config()
            change(&c)
            return AgentSettings(config: c, route: whip, token: "t", stun: nil, sendOnOpen: []).micHold
        }
        #expect(hold { _ in } == .whileEchoAudible)
        #expect(hold { $0.duplex = .half } == .whileAssistantSpeaks)
        #expect(hold { $0.aec = false } == .whileAssistantSpeaks)
        #expect(hold { $0.aec = false; $0.duplex = .full } == .never)
        #expect(hold { $0.output = "reply.wav" } == .never)
    }

    /// Only the direct OpenAI route sends `conversation.item.truncate` on a cut.
    @Test func truncateOnlyOnTheOpenAIRoute() throws {
        let openai = AgentSettings(config: Config(), route: .openai(calls: try HTTPURL("https://api.test/v1/realtime/calls"),
                                                                       tokenURL: try HTTPURL("https://backend.test/token")),
                                      token: "t", stun: nil, sendOnOpen: [])
        let whip = AgentSettings(config: Config(), route: .whip(try HTTPURL("https://provider.test/whip")), token: "t", stun: nil, sendOnOpen: [])
        #expect(openai.realtime.truncatesHeardAudio && !whip.realtime.truncatesHeardAudio)
    }
}
