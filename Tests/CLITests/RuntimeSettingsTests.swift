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
        let s = Runtime.settings(config: config, route: whip, token: "t", stun: nil, sendOnOpen: [])
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
        let openai = Runtime.settings(config: Config(), route: .openai(calls: try HTTPURL("https://api.test/v1/realtime/calls"),
                                                                       tokenURL: try HTTPURL("https://backend.test/token")),
                                      token: "t", stun: nil, sendOnOpen: [])
        #expect(openai.realtime.transcriptionModel == "gpt-4o-mini-transcribe")
        #expect(!openai.policy.iceRestart)
    }

    /// Linnet's own barge-in is on only in voice mode behind the echo canceller with
    /// the voice flag (full duplex): `barge-in-ms` 200 by default, 0 turns it off.
    @Test func localBargeInNeedsVoiceModeAECAndTheFlag() throws {
        let whip = Route.whip(try HTTPURL("https://provider.test/whip"))
        func bargeIn(_ change: (inout Config) -> Void) -> Duration? {
            var c = Config()
            c.aec = true
            c.voiceFlag = true
            change(&c)
            return Runtime.settings(config: c, route: whip, token: "t", stun: nil, sendOnOpen: []).localBargeIn
        }
        #expect(Config().bargeInMS == 200)
        #expect(bargeIn { _ in } == .milliseconds(200))
        #expect(bargeIn { $0.bargeInMS = 350 } == .milliseconds(350))
        #expect(bargeIn { $0.bargeInMS = 0 } == nil)
        #expect(bargeIn { $0.voiceFlag = false } == nil)
        #expect(bargeIn { $0.aec = false } == nil)
        #expect(bargeIn { $0.aec = false; $0.duplex = .full } == nil, "full duplex without a canceller hears itself")
        #expect(bargeIn { $0.duplex = .half } == nil)
        #expect(bargeIn { $0.turnDetection = .ptt } == nil)
    }

    /// Full duplex waits for the canceller to converge only where it rests on one:
    /// voice mode with `aec`, full duplex (the default with it).
    @Test func fullDuplexWaitsForTheCancellerOnlyBehindOne() throws {
        let whip = Route.whip(try HTTPURL("https://provider.test/whip"))
        func waits(_ change: (inout Config) -> Void) -> Bool {
            var c = Config()
            change(&c)
            return Runtime.settings(config: c, route: whip, token: "t", stun: nil, sendOnOpen: []).waitForCanceller
        }
        #expect(waits { $0.aec = true })
        #expect(!waits { $0.aec = true; $0.duplex = .half })
        #expect(!waits { $0.aec = true; $0.turnDetection = .ptt })
        #expect(!waits { $0.aec = false; $0.duplex = .full })
        #expect(!waits { _ in })
    }
}
