// What the agent core is configured with: one value filled from `Config` and the
// command (or by tests), so the core itself reads no configuration.
import Wire
import Signaling
import ICE
import Peer
import Settings

/// What the core is configured with (from `Config` and the command).
public struct AgentSettings: Sendable {
    public var route: Route
    /// The device's bearer token; it goes only to the route's configured origin.
    public var token: String?
    public var policy: SupervisorPolicy
    /// `max-attempts` (0: forever).
    public var maxAttempts: Int
    /// End cleanly this long after the first connection (nil: run until stopped).
    public var runFor: Duration?
    /// The data channel the provider's events ride on (`oai-events`).
    public var eventsChannel: String
    /// Lines sent on every new session's events channel (`send` key).
    public var sendOnOpen: [String]
    /// A stats record this often (nil: only at the end).
    public var statsInterval: Duration?
    /// Push-to-talk (the button talks) or voice detection (the button mutes).
    public var pushToTalk: Bool
    /// Voice mode: when the microphone is held shut (silence sent) so the assistant
    /// never hears itself as the user (`Config.micHold`). Chosen over
    /// `interrupt_response: false`, which would still let the provider transcribe the
    /// echo as a user turn and answer it once the response ends.
    public var micHold = MicHold.never
    /// Barge-in by Linnet's own voice flag (`barge-in-ms`): in voice mode, unless the
    /// microphone is held for the whole reply, the flag held this long without a break
    /// while the assistant speaks cuts the response at once (`localVoice`), a network
    /// round trip before the provider's VAD would. nil: off (push-to-talk, half duplex,
    /// no flag: the runtime leaves it nil).
    public var localBargeIn: Duration? = nil
    public var turnDetectionName: String
    /// The events-channel conversation (OpenAI Realtime), when the route speaks it.
    public var realtime: RealtimeSettings
    /// The peer connection's settings (ICE: STUN server, consent probe…); the host
    /// addresses come from `.socketsBound`.
    public var peer: PeerConfiguration
    /// How long gathering may take before the offer goes out with what it has.
    public var gatherTimeout: Duration = .seconds(2)
    /// The same when TURN allocations are being made: two round trips to the server
    /// (the 401 challenge, then the allocation), after a TCP and TLS handshake for
    /// `turns:`, on a network slow enough to need a relay.
    public var relayGatherTimeout: Duration = .seconds(5)
    /// `ice-transport-policy relay`: only relayed candidates are offered and paired
    /// (host candidates stay out, as in the browser's `iceTransportPolicy`).
    public var relayOnly = false
    /// Deadlines of the route's HTTP exchanges.
    public var offerTimeout: Duration = .seconds(10)
    public var closeTimeout: Duration = .seconds(3)
    public var restartTimeout: Duration = .seconds(5)
    /// OpenAI: the backend's route that hangs up a call (`hangup-url`, POST
    /// `{"call_id"}` with the device's token); nil: the ephemeral key's hangup.
    public var hangupURL: HTTPURL?
    /// A fault of the device that persists (a configured button that cannot be used):
    /// the status file's `problem` while no other is to be shown.
    public var deviceProblem: String? = nil
    /// How far in a TURN server the provider names may be (`learned-ice-servers`).
    public var learnedServerReach = LearnedServerReach.auto
    /// The configured TURN servers: their credentials are never given to another.
    public var configuredRelays: [TURNServer] = []
    /// Earlier transcript turns given to each new session (`carry-turns`; 0: none) …
    public var carryTurns = 20
    /// … at most this many bytes of their text in all.
    public var carryBytes = 8 * 1024
    /// The function tools offered to the model (the tools file). Their declarations go
    /// in `realtime.tools`; `AgentSettings(config:…)` sets both.
    public var tools: [ToolSpec] = []
    /// The daily caps (`max-daily-minutes`, `max-daily-tokens`).
    public var caps = DailyCaps()
    /// `session = on-demand`: no session until a press; it closes after `idleTimeout`
    /// with no speech either way.
    public var onDemand = false
    /// A wake word is configured: its detector's wakes make push-to-talk turns
    /// (`AgentCore+Wake`), and `pushToTalk` is on with or without a button.
    public var wakeWord = false
    public var idleTimeout = Duration.seconds(30)

    public init(route: Route, token: String?, policy: SupervisorPolicy, maxAttempts: Int, runFor: Duration?, eventsChannel: String,
                sendOnOpen: [String], statsInterval: Duration?, pushToTalk: Bool, turnDetectionName: String,
                realtime: RealtimeSettings, peer: PeerConfiguration) {
        self.route = route
        self.token = token
        self.policy = policy
        self.maxAttempts = maxAttempts
        self.runFor = runFor
        self.eventsChannel = eventsChannel
        self.sendOnOpen = sendOnOpen
        self.statsInterval = statsInterval
        self.pushToTalk = pushToTalk
        self.turnDetectionName = turnDetectionName
        self.realtime = realtime
        self.peer = peer
    }
}
