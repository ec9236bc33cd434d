// The typed view of the settings: what the rest of the program reads. Filled from the
// table (Table.swift); its rules across keys (`validate`) live here.
import Wire
import ICE
import Audio
import Signaling

// MARK: Value types

/// How the provider decides a user's turn has ended.
public enum TurnDetection: String, Sendable, Equatable, CaseIterable {
    /// The button ends the turn (`turn_detection: null`, PROTOCOLS.md).
    case ptt
    /// The provider's voice activity detection.
    case vad
}

/// Whether the microphone stays open while the assistant speaks.
public enum Duplex: String, Sendable, Equatable, CaseIterable {
    /// Open, unless echo is measured to reach the microphone and is not cancelled yet
    /// (with `aec`), or the speaker plays into the room with no canceller at all.
    case auto
    /// Always open: the user can talk over the assistant (barge-in), whatever reaches the
    /// microphone (a headset, a file, a canceller trusted from the start).
    case full
    /// Silence is sent while the assistant speaks, so its own voice never comes back as
    /// the user's; the user cannot cut in.
    case half
}

/// When a provider session exists (`session`).
public enum SessionMode: String, Sendable, Equatable, CaseIterable {
    /// From start to stop, rolled over before the provider's limit.
    case always
    /// Only while someone talks: a press starts one, `idle-seconds` with no speech
    /// either way closes it.
    case onDemand = "on-demand"
}

/// How far in an ICE server the provider names may be (`learned-ice-servers`).
public enum LearnedServerReach: String, Sendable, Equatable, CaseIterable {
    /// No further in than the route's own host (a WHIP server on this host may name
    /// servers on it; one on the internet only servers on the internet).
    case auto
    /// Only addresses on the internet.
    case internet
    /// Anywhere, this host and the LAN included.
    case any
    /// None: only the configured servers are used.
    case none
}

/// A feature that is on, off, or decided from the rest of the configuration (`auto`).
/// Written as a boolean or `auto`; a bare `--flag` is `on`, `--no-flag` `off`.
public enum AutoSwitch: String, Sendable, Equatable, CaseIterable {
    case auto
    case on
    case off
}

/// When the microphone is held shut (silence sent) in voice mode: what `duplex`, `aec`
/// and the audio ends make of it (`Config.micHold`).
public enum MicHold: Sendable, Equatable {
    /// Never: nothing the speaker plays reaches the microphone through the air, or the
    /// user chose full duplex.
    case never
    /// While the echo canceller measures echo at the microphone that it does not cancel
    /// yet (`EchoCanceller.echoAudible`).
    case whileEchoAudible
    /// While the assistant speaks (`duplex = half`, or a speaker into the room with
    /// `aec` off: nothing measures the echo then).
    case whileAssistantSpeaks
}

/// The `turn-detection` key's words: the mode, and for voice detection which kind
/// the provider is asked for (`vad` asks for none: the session keeps its own).
public enum TurnDetectionChoice: String, Sendable, Equatable, CaseIterable {
    case ptt
    case vad
    case server_vad
    case semantic_vad

    public var mode: TurnDetection { self == .ptt ? .ptt : .vad }
    public var vadType: VADType? {
        switch self {
        case .server_vad: return .serverVAD
        case .semantic_vad: return .semanticVAD
        case .ptt, .vad: return nil
        }
    }
}

/// The provider's kind of voice detection (OpenAI `turn_detection.type`).
public enum VADType: String, Sendable, Equatable {
    /// Silence after speech ends a turn (`threshold`, `silence_duration_ms`).
    case serverVAD = "server_vad"
    /// A model judges whether the user has finished.
    case semanticVAD = "semantic_vad"
}

/// `noise-reduction`: the provider's input noise reduction (`audio.input.noise_reduction`).
public enum NoiseReduction: String, Sendable, Equatable, CaseIterable {
    /// A close-talking microphone (headset).
    case near_field
    /// A microphone across the room (a kiosk, a conference HAT).
    case far_field
    /// Sent as `null`: none.
    case off
}

/// What `linnet answer` sends back.
public enum AnswerMode: String, Sendable, Equatable, CaseIterable {
    /// What it receives.
    case echo
    /// A 440 Hz tone.
    case tone
}

/// Which channel of a multi-channel capture device becomes the mono voice.
public enum CaptureChannel: Sendable, Equatable {
    /// The average of all channels.
    case mix
    /// One channel, 0-based (0 is the left of a stereo HAT).
    case index(Int)
}

/// `HOST:PORT` (IPv6 hosts in brackets), as `--stun` takes it.
public struct HostPort: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    public var description: String { (host.containsByte(UInt8(ascii: ":")) ? "[\(host)]" : host) + ":\(port)" }
}

// MARK: Config

/// Everything a command is configured with. One property per key of `SettingsTable.rows`
/// (whose row has the key's help, range and default).
///
/// The values written below are placeholders of the right type, so the struct can be
/// built; `init()` sets every property to its row's default, the one place a default is
/// written.
public struct Config: Sendable, Equatable {
    // Route (exactly one of whip, backend + chat, openai + token-url).
    public var whip: HTTPURL? = nil
    public var backend: HTTPURL? = nil
    public var chat: String? = nil
    public var openai = false
    public var tokenURL: HTTPURL? = nil
    public var openaiURL = HTTPURL(secure: true, host: "", port: 0, target: "/")
    /// The backend's route that ends an OpenAI call (`{"call_id"}`).
    public var hangupURL: HTTPURL? = nil
    /// The bearer token file; nil: `$CREDENTIALS_DIRECTORY/token` (RunCommand).
    public var tokenFile: String? = nil
    public var caFile: String? = nil
    public var pins: [SPKIPin] = []

    // Microphone and speaker.
    public var capture = ""
    public var playback = ""
    public var input: String? = nil
    public var output: String? = nil
    public var loopInput = false
    /// `linnet audio` paces the devices itself.
    public var pace = false

    // Push-to-talk button and LEDs.
    public var ptt: GPIOLine? = nil
    public var pttMode = PTTMode.hold
    public var pttRequired = false
    public var pttDebounceMS = 0
    public var pttLongPressMS = 0
    public var leds: [GPIOLine] = []
    public var ledSPI: String? = nil
    public var ledCount = 0

    // Wake word.
    public var wakeWord: WakeWordName? = nil
    public var wakeModel: String? = nil
    public var wakeSensitivity = 0.0

    // Network.
    public var stun: HostPort? = nil
    /// `stun:`, `turn:` and `turns:` servers (RFC 7064/7065 URLs), in order.
    public var iceServers: [ICEServerURL] = []
    /// Long-term credentials for the TURN servers (RFC 8489 §9.2); the credential from
    /// `ice-credential`, else `ice-credential-file`, else `$CREDENTIALS_DIRECTORY/ice-credential`.
    public var iceUsername: String? = nil
    public var iceCredential: String? = nil
    public var iceCredentialFile: String? = nil
    public var iceTransportPolicy = ICETransportPolicy.all
    /// ICE-TCP (RFC 6544): offer active TCP candidates and connect to the peer's passive ones.
    public var iceTCP = true
    public var learnedICEServers = LearnedServerReach.auto
    /// Interfaces to gather candidates on; empty: every up, non-loopback one.
    public var interfaces: [String] = []

    // Provider session.
    public var instructions: String? = nil
    public var voice: String? = nil
    public var transcriptionModel: String? = nil
    /// Nil: `ptt` when a button is configured (and not `open`), else `vad`.
    public var turnDetection: TurnDetection? = nil
    public var duplex = Duplex.auto
    /// `server_vad` / `semantic_vad` from `turn-detection`; nil: the session's own.
    public var vadType: VADType? = nil
    public var vadThreshold: Double? = nil
    public var vadSilenceMS: Int? = nil
    public var noiseReduction: NoiseReduction? = nil
    /// Milliseconds a push-to-talk commit waits after the release.
    public var pttTailMS = 0
    /// Earlier transcript turns given to a new session (0: none).
    public var carryTurns = 0
    public var maxSessionMinutes = 0
    public var maxSessionSeconds: Int? = nil
    /// Daily caps: connected minutes and provider tokens a local day (nil: none).
    public var maxDailyMinutes: Int? = nil
    /// `session`, and the idle time that closes an on-demand session.
    public var sessionMode = SessionMode.always
    public var idleSeconds = 30
    public var maxDailyTokens: Int? = nil
    public var eventsChannel = ""
    public var send: String? = nil
    /// The function tools file (JSON), and where its exec tools' programs are.
    public var tools: String? = nil
    public var toolsDir = ""

    // Running.
    public var seconds = 0
    public var maxAttempts = 0
    /// Session events as JSON lines; `-` is stdout.
    public var events: String? = nil
    public var eventsLabel: String? = nil
    public var statsSeconds = 0
    public var statusFile: String? = nil
    /// Where the Prometheus metrics file goes (`linnet.prom`, node_exporter's textfile
    /// collector).
    public var textfileDir: String? = nil
    public var stateDir: String? = nil
    public var logLevel = LogLevel.info
    /// `check`, run by root: the user it checks as (the unit's `User=`).
    public var serviceUser = ""

    // Capture hooks and Opus.
    public var rate = 0
    public var captureChannel = CaptureChannel.mix
    public var highPassHz = 0
    public var gainDB = 0.0
    public var agc = false
    public var agcTargetDBFS = 0.0
    public var noiseGate = false
    public var noiseGateDBFS = 0.0
    public var limiter = false
    public var limiterDBFS = 0.0
    /// `aec` as configured; `aec` is what it comes to.
    public var aecChoice = AutoSwitch.auto
    public var aecFilterMS = 0
    public var aecSuppressDB = 0
    public var noiseSuppressDB = 0
    /// `voice-flag` as configured; `voiceFlag` is what it comes to.
    public var voiceFlagChoice = AutoSwitch.auto
    /// `barge-in-ms`: how long Linnet's voice flag must hold over the assistant to cut it
    /// (voice mode, full duplex with aec and voice-flag); 0: off.
    public var bargeInMS = 0
    /// `linnet audio`'s offline echo reference: what the speaker played.
    public var reference: String? = nil
    /// `linnet audio`'s live echo test: what the speaker plays instead of the loopback.
    public var farEnd: String? = nil
    /// `linnet audio`'s live mode: what would be sent (after the hooks, through Opus and
    /// back), to a WAV file.
    public var sent: String? = nil
    public var bitrate = 0
    public var complexity = 0
    public var fec = false
    public var dtx = false
    public var frameMS = 0

    // `linnet answer`.
    public var listen: SocketAddress? = nil
    /// The addresses a peer outside a one-to-one NAT reaches this host at (`advertise`).
    public var advertise: [IPAddress] = []
    public var answerMode = AnswerMode.echo

    /// Which layer set each key (absent: the default). Keyed by the key's bytes: keys are
    /// the table's ASCII names, compared as written (Wire/Text.swift).
    public var sources: [TextKey: ConfigSource] = [:]
    /// The command whose flags and defaults apply (an empty value resets to its default).
    public internal(set) var command = Command.run

    /// `run`'s defaults.
    public init() { self = Config.runDefaults }

    /// `command`'s defaults: each row's, or the command's own where the row has one.
    public init(for command: Command) {
        self = command == .run ? Config.runDefaults : Config.defaults(for: command)
    }

    /// Every property at its placeholder (only to start `defaults(for:)` from).
    init(placeholders: ()) {}

    static let runDefaults = defaults(for: .run)

    static func defaults(for command: Command) -> Config {
        var c = Config(placeholders: ())
        c.command = command
        for key in SettingsTable.rows { c.reset(key) }
        return c
    }

    /// The key's default for this config's command (or unset).
    mutating func reset(_ key: Key) {
        if let text = key.defaultText(for: command) { _ = key.assign(&self, text) } else { key.clear(&self) }
    }

    // MARK: Derived values

    /// The session limit in effect.
    public var maximumSessionSeconds: Int { maxSessionSeconds ?? maxSessionMinutes * 60 }

    /// The turn detection in effect.
    public var effectiveTurnDetection: TurnDetection {
        if let turnDetection { return turnDetection }
        // A wake word's turns are push-to-talk turns, with or without a button.
        if wakeEnabled { return .ptt }
        return ptt != nil && pttMode != .open ? .ptt : .vad
    }

    /// A wake word is configured (`wake-word` or `wake-model`).
    public var wakeEnabled: Bool { wakeWord != nil || wakeModel != nil }

    /// The wake model's file (`.tflite`, its `.json` beside it): `wake-model`, or the
    /// packaged model `wake-word` names.
    public var wakeModelPath: String? {
        if let wakeModel { return wakeModel }
        return wakeWord.map { WakeWordName.directory + "/" + $0.rawValue + ".tflite" }
    }

    /// Whether what the speaker plays can reach the microphone through the air: a
    /// capture device and a playback device, neither replaced by a file nor `none`.
    public var acousticPath: Bool {
        input == nil && output == nil && !capture.bytesEqual("none") && !playback.bytesEqual("none")
    }

    /// Echo cancellation in effect: `auto` turns it on wherever there is echo to cancel:
    /// for `run`, a real speaker and microphone; for `linnet audio`, a far end to cancel
    /// (the offline `--reference`, the live `--far-end`), never its loopback, where the
    /// speaker plays the microphone itself.
    public var aec: Bool {
        get {
            switch aecChoice {
            case .on: return true
            case .off: return false
            case .auto: return command == .audio ? reference != nil || farEnd != nil : acousticPath
            }
        }
        set { aecChoice = newValue ? .on : .off }
    }

    /// When voice mode holds the microphone shut while the assistant speaks.
    public var micHold: MicHold {
        switch duplex {
        case .full: return .never
        case .half: return .whileAssistantSpeaks
        case .auto:
            if aec { return .whileEchoAudible }
            return acousticPath ? .whileAssistantSpeaks : .never
        }
    }

    /// The voice-activity flag in effect: `auto` turns it on where it can cut the
    /// assistant at once (`run` in voice mode, with the microphone not held for the
    /// whole reply) and behind the echo canceller, whose preprocessor computes it anyway.
    public var voiceFlag: Bool {
        get {
            switch voiceFlagChoice {
            case .on: return true
            case .off: return false
            case .auto:
                if aec && aecSuppressDB > 0 { return true }
                // The wake word's turn ends on it.
                if command == .run && wakeEnabled { return true }
                return command == .run && effectiveTurnDetection == .vad && micHold != .whileAssistantSpeaks
            }
        }
        set { voiceFlagChoice = newValue ? .on : .off }
    }

    /// `run`'s keys, as the config file, `LINNET_…` and `--…` spell them.
    public static var keys: [String] { SettingsTable.layerKeys }

    /// The default config file, read when it exists and no other is named.
    public static let defaultPath = "/etc/linnet/linnet.conf"

    // MARK: Rules across keys

    /// Checks what no single key can: one route, and options that cannot work without
    /// another. Harmless leftovers (a `ptt-mode` with no button, `agc-target-dbfs` with
    /// AGC off) are allowed, so a higher layer can switch a feature off without unsetting
    /// its tuning; `input` / `output` simply replace `capture` / `playback`.
    public func validate(requireRoute: Bool = true) throws(ConfigError) {
        func at(_ key: String) -> String {
            guard let s = sources[TextKey(key)] else { return key }
            return "\(key) (\(s))"
        }
        var routes: [String] = []
        if whip != nil { routes.append("whip") }
        if backend != nil { routes.append("backend") }
        if openai { routes.append("openai") }
        if routes.count > 1 {
            var list = ""
            for (i, r) in routes.enumerated() { list += (i == 0 ? "" : (i == routes.count - 1 ? " and " : ", ")) + at(r) }
            // Suggest unsetting the route from the lowest layer: the newer one is
            // more likely what the user means now.
            func layer(_ key: String) -> Int {
                switch sources[TextKey(key)] {
                case .file?: return 0
                case .environment?: return 1
                case .flag?: return 2
                case nil: return 0
                }
            }
            var oldest = routes[0]
            for r in routes where layer(r) < layer(oldest) { oldest = r }
            let both = routes.count == 2 ? "both" : "all"
            throw .conflict("choose one route: \(list) are \(both) set (unset one with an empty value, e.g. --\(oldest)=)", source: nil)
        }
        if routes.isEmpty && requireRoute {
            throw .conflict("no route: set whip, backend (with chat) or openai (with token-url)", source: nil)
        }
        if backend != nil && chat == nil {
            throw .conflict("backend needs chat (the chat id of the backend's voice route)", source: sources["backend"])
        }
        if chat != nil && backend == nil {
            throw .conflict("chat applies only with backend", source: sources["chat"])
        }
        if openai && tokenURL == nil {
            throw .conflict("openai needs token-url (where the backend hands out ephemeral keys)", source: sources["openai"])
        }
        if tokenURL != nil && !openai {
            throw .conflict("token-url applies only with openai", source: sources["token-url"])
        }
        // Push-to-talk without a GPIO button is allowed: the terminal's space bar and
        // SIGUSR1 drive the same path. An open-mic button mode contradicts it.
        if turnDetection == .ptt && ptt != nil && pttMode == .open {
            throw .conflict("turn-detection ptt contradicts ptt-mode open (no button): use ptt-mode hold or toggle", source: sources["turn-detection"])
        }
        if wakeWord != nil && wakeModel != nil {
            throw .conflict("wake-word and wake-model both name a model: give one (wake-model = PATH.tflite for your own)", source: sources["wake-model"])
        }
        if wakeEnabled && effectiveTurnDetection == .vad {
            throw .conflict("a wake word makes push-to-talk turns: turn-detection vad (an always-open microphone) contradicts it", source: sources["turn-detection"])
        }
        if wakeEnabled && ptt != nil && pttMode == .open {
            throw .conflict("a wake word makes push-to-talk turns: ptt-mode open (the button does not gate the microphone) contradicts it; use hold or toggle", source: sources["ptt-mode"])
        }
        if wakeEnabled && voiceFlagChoice == .off {
            throw .conflict("a wake word's turn ends on the voice flag: voice-flag off contradicts it", source: sources["voice-flag"])
        }
        if pttRequired && ptt == nil {
            throw .conflict("ptt-required needs a button (ptt = GPIO17 or CHIP:OFFSET)", source: sources["ptt-required"])
        }
        if let ptt, leds.contains(ptt) {
            throw .conflict("the LED line \(ptt) is also the push-to-talk button", source: sources["leds"])
        }
        for (i, l) in leds.enumerated() where leds[..<i].contains(l) {
            throw .conflict("the LED line \(l) is listed twice", source: sources["leds"])
        }
    }
}

/// `ice-transport-policy` (as the browser's `RTCIceTransportPolicy`): `relay` offers and
/// uses only relayed candidates.
public enum ICETransportPolicy: String, CaseIterable, Sendable {
    case all, relay
}

/// The wake words whose models the package carries (`/usr/share/linnet/wake`, from
/// pymicro-wakeword 2.5.0: Apache-2.0).
public enum WakeWordName: String, Sendable, Equatable, CaseIterable {
    case okay_nabu, hey_jarvis, alexa, hey_mycroft

    public static let directory = "/usr/share/linnet/wake"
}
