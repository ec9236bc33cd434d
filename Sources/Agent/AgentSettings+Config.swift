// The agent's settings made from the configuration: the policy a user does not set
// (consent timing, the transcription model, the commit floor, when Linnet's own
// barge-in may act) is chosen here, beside the settings, not in the runtime.
import Wire
import Signaling
import ICE
import Peer
import JSON
import Settings

extension AgentSettings {
    /// The core's settings from the command's config: every choice the configuration
    /// leaves to Linnet is made here, where `AgentSettingsTests` checks it.
    public init(config: Config, route: Route, token: String?, stun: SocketAddress?, addresses: [SocketAddress] = [],
                sendOnOpen: [String], tools toolSpecs: [ToolSpec] = []) {
        var policy = SupervisorPolicy()
        policy.maximumSessionAge = .seconds(Int64(config.maximumSessionSeconds))
        // WHIP can restart ICE (where the endpoint gave an ETag; a session without one
        // reports that at once and a fresh session follows).
        policy.iceRestart = route.restartsICE
        var peer = PeerConfiguration(hostAddresses: addresses)
        peer.ice.stunServer = stun
        peer.ice.useVoiceCallConsent()
        peer.ice.tcpActive = config.iceTCP
        var realtime = RealtimeSettings(config: config)
        // Without a transcription model the service sends no user transcripts; on the
        // direct OpenAI route Linnet asks for its small one unless told otherwise (a
        // backend configures its own sessions).
        if case .openai = route, realtime.transcriptionModel == nil { realtime.transcriptionModel = "gpt-4o-mini-transcribe" }
        // 100 ms is the service's floor for a commit, counted from what reached its
        // buffer; RTP arrives behind the data channel, so 150 ms of sent audio keeps a
        // just-long-enough press from failing as `commit_empty`.
        realtime.minimumCommitMilliseconds = 150
        self.init(route: route, token: token, policy: policy, maxAttempts: config.maxAttempts,
                  runFor: config.seconds > 0 ? .seconds(Int64(config.seconds)) : nil, eventsChannel: config.eventsChannel,
                  sendOnOpen: sendOnOpen, statsInterval: config.statsSeconds > 0 ? .seconds(Int64(config.statsSeconds)) : nil,
                  pushToTalk: config.effectiveTurnDetection == .ptt, turnDetectionName: config.effectiveTurnDetection.rawValue,
                  realtime: realtime, peer: peer)
        self.micHold = config.micHold
        // Linnet's own barge-in needs the flag to hear the user and not the assistant:
        // voice mode, the microphone not held for the whole reply, and no speaker heard
        // by the microphone without a canceller in between (behind the canceller the
        // core also waits while echo is measured uncancelled).
        let flagHearsTheUser = config.aec || !config.acousticPath
        if config.effectiveTurnDetection == .vad, config.micHold != .whileAssistantSpeaks, flagHearsTheUser, config.voiceFlag, config.bargeInMS > 0 {
            self.localBargeIn = .milliseconds(Int64(config.bargeInMS))
        }
        // The direct route tells OpenAI what the user heard of a reply they cut off.
        if case .openai = route { self.realtime.truncatesHeardAudio = true }
        tools = toolSpecs
        self.realtime.tools = toolSpecs.map { $0.declaration }
        self.carryTurns = config.carryTurns
        self.learnedServerReach = config.learnedICEServers
        self.hangupURL = config.hangupURL
        self.caps = DailyCaps(minutes: config.maxDailyMinutes, tokens: config.maxDailyTokens)
        self.onDemand = config.sessionMode == .onDemand
        self.wakeWord = config.wakeEnabled
        self.idleTimeout = .seconds(Int64(config.idleSeconds))
    }

}
