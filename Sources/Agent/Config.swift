/// Configuration of `linnet run`: the typed `Config`, read from three layers.
///
/// Design decisions:
/// - Pure: the caller passes the file's text, the environment and the arguments in; no
///   file is opened here, so every rule is testable and the IO layer decides which file
///   to read (`Config.configPath`).
/// - One key space: a key is the long option name of CLI.md's `run` without the dashes
///   (`gain-db`), `LINNET_GAIN_DB` in the environment and `--gain-db` on the command
///   line. Layers: file < environment < flags; a later layer replaces a value, and an
///   empty value (`ptt =`, `LINNET_PTT=`, `--ptt=`) resets the key to its default.
/// - Strict: unknown keys and bad values are errors naming where they came from
///   (`linnet.conf:12`, `environment LINNET_X`, `--flag`), with a "did you mean" for
///   typos. A key twice in the file is an error (a hand-edited file's mistake); a flag
///   twice takes the last (wrapper scripts append overrides).
/// - File syntax: `key = value` lines; whole-line comments starting with `#` or `;`;
///   blank lines; a value may be in double quotes with `\"`, `\\`, `\n` and `\t`
///   escapes (quotes keep leading/trailing spaces and `#`). There are no inline
///   comments: `seconds = 5 # five` is a bad value, which the error message shows.
/// - Booleans: `true|false|yes|no|on|off|1|0`; on the command line a bare `--fec` is
///   true, `--no-fec` false, `--fec=false` works; `--fec false` does not (a boolean
///   flag never eats the next argument).
/// - Decimal values (dB) are parsed here without the C library (Embedded), as an
///   optional sign, digits and an optional fraction; no exponents.
import Signaling
import Wire
import Audio

// MARK: Errors

/// Where a value came from.
public enum ConfigSource: Sendable, Equatable, CustomStringConvertible {
    /// A line of the config file (1-based).
    case file(path: String, line: Int)
    /// An environment variable (its full name, e.g. `LINNET_SECONDS`).
    case environment(String)
    /// A command-line flag as written, without any `=value` (e.g. `--seconds`).
    case flag(String)

    public var description: String {
        switch self {
        case .file(let path, let line): return "\(path):\(line)"
        case .environment(let name): return "environment \(name)"
        case .flag(let flag): return flag
        }
    }
}

/// A configuration the agent cannot run with; the message names the source.
public enum ConfigError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A key no option has; `suggestion` is the nearest known key, if any is close.
    case unknownKey(String, source: ConfigSource, suggestion: String?)
    /// A value the key does not take; `expected` says what it takes ("a whole number ≥ 0").
    case badValue(key: String, value: String, expected: String, source: ConfigSource)
    /// A file line that is not `key = value`, a comment or blank; `why` explains.
    case syntax(String, source: ConfigSource)
    /// The same key twice in the file; `firstLine` is where it was set first.
    case duplicateKey(String, source: ConfigSource, firstLine: Int)
    /// A flag that takes a value came last on the command line.
    case missingValue(flag: String)
    /// A command-line word that is not a `--flag` (or a value a boolean flag cannot take).
    case unexpectedArgument(String)
    /// A rule across keys is broken (e.g. `backend` without `chat`); `source` is where
    /// the key that needs fixing was set.
    case conflict(String, source: ConfigSource?)

    public var description: String {
        switch self {
        case .unknownKey(let key, let source, let suggestion):
            let hint = suggestion.map { " (did you mean '\($0)'?)" } ?? ""
            switch source {
            case .file: return "\(source): unknown key '\(key)'\(hint)"
            case .environment: return "\(source): unknown variable\(hint)"
            case .flag: return "unknown option '\(key)'\(hint)"
            }
        case .badValue(let key, let value, let expected, let source):
            if case .flag = source { return "\(source): '\(value)' is not \(expected)" }
            return "\(source): \(key): '\(value)' is not \(expected)"
        case .syntax(let why, let source): return "\(source): \(why)"
        case .duplicateKey(let key, let source, let first): return "\(source): '\(key)' is already set on line \(first)"
        case .missingValue(let flag): return "\(flag) needs a value"
        case .unexpectedArgument(let word): return "unexpected argument '\(word)' (options are --key value, --key=value, or --flag for booleans)"
        case .conflict(let why, let source): return source.map { "\($0): \(why)" } ?? why
        }
    }
}

// MARK: Value types

/// How the provider decides a user's turn has ended.
public enum TurnDetection: String, Sendable, Equatable, CaseIterable {
    /// The button ends the turn (`turn_detection: null`, PROTOCOLS.md).
    case ptt
    /// The provider's voice activity detection.
    case vad
}

/// Which channel of a multi-channel capture device becomes the mono voice.
public enum CaptureChannel: Sendable, Equatable {
    /// The average of all channels.
    case mix
    /// One channel, 0-based (0 is the left of a stereo HAT).
    case index(Int)
}

/// A push-to-talk GPIO line: a line name (`GPIO17`) or `CHIP:OFFSET` (`gpiochip0:17`).
public enum GPIOLine: Sendable, Equatable {
    case name(String)
    case chip(String, offset: Int)
}

// BEGIN board keys (issue 7)
extension GPIOLine: CustomStringConvertible {
    /// As the config spells it: `GPIO17` or `gpiochip0:17`.
    public var description: String {
        switch self {
        case .name(let n): return n
        case .chip(let c, let o): return "\(c):\(o)"
        }
    }
}
// END board keys

/// `HOST:PORT` (IPv6 hosts in brackets), as `--stun` takes it.
public struct HostPort: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    public var description: String { (host.contains(":") ? "[\(host)]" : host) + ":\(port)" }
}

// MARK: Config

/// Everything `linnet run` is configured with, with its defaults.
public struct Config: Sendable, Equatable {
    // Route (exactly one of whip, backend + chat, openai + token-url).
    /// WHIP endpoint (RFC 9725).
    public var whip: HTTPURL? = nil
    /// The app backend's base URL (`POST {backend}/voice/{chat}`).
    public var backend: HTTPURL? = nil
    /// The chat id for the backend's voice routes.
    public var chat: String? = nil
    /// OpenAI Realtime directly, with an ephemeral key from `tokenURL`.
    public var openai = false
    public var tokenURL: HTTPURL? = nil
    /// The bearer token file; nil: `$CREDENTIALS_DIRECTORY/token`.
    public var tokenFile: String? = nil
    /// A PEM CA file trusted in addition to the system bundle (a private backend's CA).
    public var caFile: String? = nil
    /// SPKI pins for the signaling host (RFC 7469 pin-sha256, comma separated).
    public var pins: [SPKIPin] = []

    // Devices.
    public var capture = "default"
    public var playback = "default"
    /// A WAV file as the microphone instead of `capture`.
    public var input: String? = nil
    /// A WAV file instead of `playback`.
    public var output: String? = nil
    public var ptt: GPIOLine? = nil
    public var pttMode = PTTMode.hold
    /// Session events as JSON lines; `-` is stdout.
    public var events: String? = nil
    /// A label added to every event line (tells devices apart in fleet logs).
    public var eventsLabel: String? = nil
    /// End the session cleanly after this many seconds (0: run forever).
    public var seconds = 0
    public var stun: HostPort? = nil
    /// Interfaces to gather candidates on; empty: every up, non-loopback one.
    public var interfaces: [String] = []
    public var logLevel = LogLevel.info
    /// Log a statistics line every this many seconds (0: never).
    public var statsSeconds = 0
    /// A file the agent rewrites with its session state on each change.
    public var statusFile: String? = nil

    // Audio pipeline and hooks.
    /// The pipeline's sample rate: 16000, 24000 or 48000 (all Opus rates).
    public var rate = 48_000
    public var captureChannel = CaptureChannel.mix
    /// Fixed gain before the other hooks, -40…40 dB.
    public var gainDB = 0.0
    public var agc = false
    /// The level AGC steers speech to, -40…-1 dBFS.
    public var agcTargetDBFS = -18.0
    public var noiseGate = false
    /// Below this level the gate closes, -90…-20 dBFS.
    public var noiseGateDBFS = -50.0
    public var limiter = true
    /// High-pass corner (DC and rumble removal), 20…1000 Hz; 0 turns it off.
    public var highPassHz = 80

    // Opus (RFC 6716 / 7587).
    /// Target bitrate, 6000…510000 bit/s.
    public var bitrate = 32_000
    /// Encoder complexity 0…10 (5 keeps a Pi Zero 2 comfortable).
    public var complexity = 5
    /// In-band forward error correction.
    public var fec = true
    /// Discontinuous transmission in silence.
    public var dtx = false
    /// Frame duration: 10 or 20 ms.
    public var frameMS = 20

    // Provider session.
    public var instructions: String? = nil
    public var voice: String? = nil
    public var transcriptionModel: String? = nil
    /// Nil: `ptt` when a button is configured (and not `open`), else `vad`.
    public var turnDetection: TurnDetection? = nil
    /// The provider's session limit; the agent rolls over to a new session before it.
    public var maxSessionMinutes = 60

    // Agent runner (issue 6).
    /// Overrides max-session-minutes with seconds (short limits for tests and demos).
    public var maxSessionSeconds: Int? = nil
    /// Give up (exit) after this many failed attempts in a row; 0: retry forever.
    public var maxAttempts = 0
    /// Start `input` again at its end.
    public var loopInput = false
    /// Where OpenAI Realtime calls are created (the ephemeral key is the bearer).
    public var openaiURL = HTTPURL(secure: true, host: "api.openai.com", port: 443, target: "/v1/realtime/calls")
    /// Text lines to send on the events channel once it is open.
    public var send: String? = nil
    /// The label of the data channel the agent opens for provider events.
    public var eventsChannel = "oai-events"

    /// The session limit in effect.
    public var maximumSessionSeconds: Int { maxSessionSeconds ?? maxSessionMinutes * 60 }
    // BEGIN board keys (issue 7): push-to-talk button details and status LEDs.
    /// Whether a push-to-talk button that cannot be opened stops the agent (true) or
    /// is logged as a warning and the agent carries on without it (false).
    public var pttRequired = false
    /// The button's debounce: a level counts once stable this long, 1…500 ms.
    public var pttDebounceMS = 20
    /// Holding the button this long ends the session or starts a new one; 0: off.
    public var pttLongPressMS = 3_000
    /// Plain status LEDs on GPIO lines, in order (`GPIO5,GPIO6`).
    public var leds: [GPIOLine] = []
    /// A spidev device with APA102 LEDs (the ReSpeaker 2-Mic HAT: `/dev/spidev0.0`).
    public var ledSPI: String? = nil
    /// How many APA102 LEDs are on `ledSPI`, 1…255.
    public var ledCount = 3
    // END board keys

    /// Which layer set each key (absent: the default).
    public var sources: [String: ConfigSource] = [:]

    public init() {}

    /// The turn detection in effect.
    public var effectiveTurnDetection: TurnDetection {
        if let turnDetection { return turnDetection }
        return ptt != nil && pttMode != .open ? .ptt : .vad
    }

    /// Every key, as the file, `LINNET_…` and `--…` spell it.
    public static let keys: [String] = [
        "whip", "backend", "chat", "openai", "token-url", "token-file", "ca-file", "pin-sha256",
        "capture", "playback", "input", "output", "ptt", "ptt-mode", "events", "events-label",
        "seconds", "stun", "interfaces", "log-level", "stats-seconds", "status-file",
        "rate", "capture-channel", "gain-db", "agc", "agc-target-dbfs", "noise-gate", "noise-gate-dbfs",
        "limiter", "high-pass-hz", "bitrate", "complexity", "fec", "dtx", "frame-ms",
        "instructions", "voice", "transcription-model", "turn-detection", "max-session-minutes",
        "max-session-seconds", "max-attempts", "loop-input", "openai-url", "send", "events-channel",
        // board keys (issue 7)
        "ptt-required", "ptt-debounce-ms", "ptt-long-press-ms", "leds", "led-spi", "led-count",
    ]

    /// Keys whose values are booleans (a bare `--key` sets them).
    public static let booleanKeys: [String] = ["openai", "agc", "noise-gate", "limiter", "fec", "dtx", "loop-input",
                                               "ptt-required"]  // board keys (issue 7)

    /// The default config file, read when it exists and no other is named.
    public static let defaultPath = "/etc/linnet/linnet.conf"

    // MARK: Loading

    /// Which config file to read: `--config FILE` (or `--config=FILE`), else
    /// `LINNET_CONFIG`, else `defaultPath`. `explicit` is false for the default: the
    /// caller reads it only when it exists, while a named file must exist.
    public static func configPath(arguments: [String], environment: [String: String]) throws(ConfigError) -> (path: String, explicit: Bool) {
        var found: String? = nil
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            if a == "--config" {
                guard i + 1 < arguments.count, !arguments[i + 1].isEmpty else { throw .missingValue(flag: "--config") }
                found = arguments[i + 1]
                i += 2
                continue
            }
            if a.hasPrefix("--config=") {
                let v = String(a.dropFirst(9))
                guard !v.isEmpty else { throw .missingValue(flag: "--config") }
                found = v
            }
            i += 1
        }
        if let found { return (found, true) }
        if let env = environment["LINNET_CONFIG"], !env.isEmpty { return (env, true) }
        return (defaultPath, false)
    }

    /// Reads the layers in order (file < environment < flags) and checks the rules
    /// across keys.
    /// - Parameters:
    ///   - file: the config file's path (for messages) and text; nil when there is none.
    ///   - environment: the process environment; only `LINNET_…` names are read.
    ///   - arguments: the words after `linnet run`.
    ///   - requireRoute: whether one of whip / backend / openai must be set (`run`
    ///     needs one; `check` may not).
    public static func load(file: (path: String, text: String)?, environment: [String: String],
                            arguments: [String], requireRoute: Bool = true) throws(ConfigError) -> Config {
        var config = Config()
        if let file { try config.apply(fileText: file.text, path: file.path) }
        try config.apply(environment: environment)
        try config.apply(arguments: arguments)
        try config.validate(requireRoute: requireRoute)
        return config
    }

    /// Applies a config file's `key = value` lines.
    public mutating func apply(fileText text: String, path: String) throws(ConfigError) {
        var firstLine: [String: Int] = [:]
        var lineNumber = 0
        var bytes = Array(text.utf8)
        // A UTF-8 byte order mark from a Windows editor is not part of the first key.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        for rawLine in bytes.split(separator: 10, omittingEmptySubsequences: false) {
            lineNumber += 1
            let source = ConfigSource.file(path: path, line: lineNumber)
            var line = ArraySlice(rawLine)
            if line.last == 13 { line = line.dropLast() }  // CRLF
            line = trimmed(line)
            if line.isEmpty || line.first == 35 || line.first == 59 { continue }  // '#' ';'
            guard let eq = line.firstIndex(of: 61) else {  // '='
                throw .syntax("expected 'key = value', found '\(string(line))'", source: source)
            }
            let key = string(trimmed(line[line.startIndex..<eq]))
            guard !key.isEmpty else { throw .syntax("missing key before '='", source: source) }
            let value = try Self.parseFileValue(trimmed(line[(eq + 1)...]), source: source)
            if key == "config" {
                throw .syntax("'config' cannot be set inside the config file (use --config or LINNET_CONFIG)", source: source)
            }
            guard Self.keys.contains(key) else { throw Self.unknown(key, source: source) }
            if let first = firstLine[key] { throw .duplicateKey(key, source: source, firstLine: first) }
            firstLine[key] = lineNumber
            try set(key, value, source: source)
        }
    }

    /// Applies `LINNET_KEY` variables (dashes become underscores, upper case), in name
    /// order so the first error reported does not depend on the environment's order.
    public mutating func apply(environment: [String: String]) throws(ConfigError) {
        for name in environment.keys.sorted() where name.hasPrefix("LINNET_") {
            if name == "LINNET_CONFIG" { continue }  // read by configPath
            let value = environment[name] ?? ""
            let key = Self.keyFromEnvironment(name)
            let source = ConfigSource.environment(name)
            guard Self.keys.contains(key) else {
                let suggestion = Self.suggestion(for: key).map { Self.environmentName($0) }
                throw .unknownKey(name, source: source, suggestion: suggestion)
            }
            try set(key, value, source: source)
        }
    }

    /// Applies `--key value`, `--key=value`, `--flag` and `--no-flag` words.
    public mutating func apply(arguments: [String]) throws(ConfigError) {
        var i = 0
        while i < arguments.count {
            let word = arguments[i]
            i += 1
            guard word.hasPrefix("--"), word.count > 2 else { throw .unexpectedArgument(word) }
            var name = String(word.dropFirst(2))
            var inlineValue: String? = nil
            if let eq = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            let flag = "--" + name
            if name == "config" {
                // Read by configPath; skip its value here.
                if inlineValue == nil { i += 1 }
                continue
            }
            if Self.booleanKeys.contains(name) {
                try set(name, inlineValue ?? "true", source: .flag(flag))
                continue
            }
            if name.hasPrefix("no-"), inlineValue == nil, Self.booleanKeys.contains(String(name.dropFirst(3))) {
                try set(String(name.dropFirst(3)), "false", source: .flag(flag))
                continue
            }
            guard Self.keys.contains(name) else {
                throw .unknownKey(flag, source: .flag(flag), suggestion: Self.suggestion(for: name).map { "--" + $0 })
            }
            if let inlineValue {
                try set(name, inlineValue, source: .flag(flag))
            } else {
                // `--ptt --seconds 5`: the next word is a flag, not ptt's value.
                guard i < arguments.count, !arguments[i].hasPrefix("--") else { throw .missingValue(flag: flag) }
                try set(name, arguments[i], source: .flag(flag))
                i += 1
            }
        }
    }

    // MARK: Values

    /// Sets one key from its text form; an empty value restores the default.
    public mutating func set(_ key: String, _ value: String, source: ConfigSource) throws(ConfigError) {
        func bad(_ expected: String) -> ConfigError {
            .badValue(key: key, value: value, expected: expected, source: source)
        }
        if value.isEmpty {
            guard Self.keys.contains(key) else { throw Self.unknown(key, source: source) }
            resetToDefault(key)
            sources[key] = nil
            return
        }
        switch key {
        case "whip": whip = try url(value, bad)
        case "backend": backend = try url(value, bad)
        case "chat": chat = try token(value, bad)
        case "openai": openai = try boolean(value, bad)
        case "token-url": tokenURL = try url(value, bad)
        case "token-file": tokenFile = value
        case "ca-file": caFile = value
        case "pin-sha256":
            var list: [SPKIPin] = []
            for part in value.split(separator: ",", omittingEmptySubsequences: false) {
                let text = string(trimmed(ArraySlice(part.utf8)))
                do throws(TLSError) {
                    list.append(try SPKIPin(base64: text))
                } catch {
                    throw bad("a comma list of pin-sha256 values (base64 of 32 bytes)")
                }
            }
            pins = list
        case "capture": capture = value
        case "playback": playback = value
        case "input": input = value
        case "output": output = value
        case "ptt": ptt = try gpioLine(value, bad)
        case "ptt-mode": pttMode = try choice(value, bad)
        case "events": events = value
        case "events-label": eventsLabel = value
        case "seconds": seconds = try whole(value, 0...Int(Int32.max), bad("a whole number ≥ 0"))
        case "stun": stun = try hostPort(value, bad)
        case "interfaces": interfaces = try interfaceList(value, bad)
        case "log-level":
            guard let level = LogLevel(name: lowercasedASCII(value)) else { throw bad("one of error, warn, info, debug") }
            logLevel = level
        case "stats-seconds": statsSeconds = try whole(value, 0...86_400, bad("a whole number of seconds from 0 to 86400"))
        case "status-file": statusFile = value
        case "rate":
            let r = try whole(value, 0...1_000_000, bad("one of 16000, 24000, 48000"))
            guard r == 16_000 || r == 24_000 || r == 48_000 else { throw bad("one of 16000, 24000, 48000") }
            rate = r
        case "capture-channel":
            captureChannel = value == "mix" ? .mix : .index(try whole(value, 0...31, bad("'mix' or a channel number from 0 to 31")))
        case "gain-db": gainDB = try decimal(value, -40...40, bad("a number of dB from -40 to 40"))
        case "agc": agc = try boolean(value, bad)
        case "agc-target-dbfs": agcTargetDBFS = try decimal(value, -40...(-1), bad("a level in dBFS from -40 to -1"))
        case "noise-gate": noiseGate = try boolean(value, bad)
        case "noise-gate-dbfs": noiseGateDBFS = try decimal(value, -90...(-20), bad("a level in dBFS from -90 to -20"))
        case "limiter": limiter = try boolean(value, bad)
        case "high-pass-hz":
            let hz = try whole(value, 0...1000, bad("0 (off) or a frequency from 20 to 1000 Hz"))
            guard hz == 0 || hz >= 20 else { throw bad("0 (off) or a frequency from 20 to 1000 Hz") }
            highPassHz = hz
        case "bitrate": bitrate = try whole(value, 6000...510_000, bad("a bitrate from 6000 to 510000 bit/s"))
        case "complexity": complexity = try whole(value, 0...10, bad("a whole number from 0 to 10"))
        case "fec": fec = try boolean(value, bad)
        case "dtx": dtx = try boolean(value, bad)
        case "frame-ms":
            let ms = try whole(value, 0...1000, bad("10 or 20"))
            guard ms == 10 || ms == 20 else { throw bad("10 or 20") }
            frameMS = ms
        case "instructions": instructions = value
        case "voice": voice = try token(value, bad)
        case "transcription-model": transcriptionModel = try token(value, bad)
        case "turn-detection": turnDetection = try choice(value, bad) as TurnDetection
        case "max-session-minutes": maxSessionMinutes = try whole(value, 1...1440, bad("a whole number of minutes from 1 to 1440"))
        case "max-session-seconds": maxSessionSeconds = try whole(value, 10...86_400, bad("a whole number of seconds from 10 to 86400"))
        case "max-attempts": maxAttempts = try whole(value, 0...1_000_000, bad("a whole number ≥ 0 (0: retry forever)"))
        case "loop-input": loopInput = try boolean(value, bad)
        case "openai-url": openaiURL = try url(value, bad)
        case "send": send = value
        case "events-channel":
            guard value.utf8.count <= 1024 else { throw bad("a label of at most 1024 bytes") }
            eventsChannel = value
        // BEGIN board keys (issue 7)
        case "ptt-required": pttRequired = try boolean(value, bad)
        case "ptt-debounce-ms": pttDebounceMS = try whole(value, 1...500, bad("a whole number of milliseconds from 1 to 500"))
        case "ptt-long-press-ms":
            let expected = "0 (off) or a whole number of milliseconds from 500 to 60000"
            let ms = try whole(value, 0...60_000, bad(expected))
            guard ms == 0 || ms >= 500 else { throw bad(expected) }
            pttLongPressMS = ms
        case "leds":
            var list: [GPIOLine] = []
            for part in value.split(separator: ",", omittingEmptySubsequences: false) {
                let expected = "a comma list of GPIO lines (GPIO5,GPIO6 or gpiochip0:5)"
                let text = string(trimmed(ArraySlice(part.utf8)))
                guard !text.isEmpty else { throw bad(expected) }
                list.append(try gpioLine(text, { _ in bad(expected) }))
            }
            leds = list
        case "led-spi": ledSPI = value
        case "led-count": ledCount = try whole(value, 1...255, bad("a whole number of LEDs from 1 to 255"))
        // END board keys
        default: throw Self.unknown(key, source: source)
        }
        sources[key] = source
    }

    private mutating func resetToDefault(_ key: String) {
        let d = Config()
        switch key {
        case "whip": whip = d.whip
        case "backend": backend = d.backend
        case "chat": chat = d.chat
        case "openai": openai = d.openai
        case "token-url": tokenURL = d.tokenURL
        case "token-file": tokenFile = d.tokenFile
        case "ca-file": caFile = d.caFile
        case "pin-sha256": pins = d.pins
        case "capture": capture = d.capture
        case "playback": playback = d.playback
        case "input": input = d.input
        case "output": output = d.output
        case "ptt": ptt = d.ptt
        case "ptt-mode": pttMode = d.pttMode
        case "events": events = d.events
        case "events-label": eventsLabel = d.eventsLabel
        case "seconds": seconds = d.seconds
        case "stun": stun = d.stun
        case "interfaces": interfaces = d.interfaces
        case "log-level": logLevel = d.logLevel
        case "stats-seconds": statsSeconds = d.statsSeconds
        case "status-file": statusFile = d.statusFile
        case "rate": rate = d.rate
        case "capture-channel": captureChannel = d.captureChannel
        case "gain-db": gainDB = d.gainDB
        case "agc": agc = d.agc
        case "agc-target-dbfs": agcTargetDBFS = d.agcTargetDBFS
        case "noise-gate": noiseGate = d.noiseGate
        case "noise-gate-dbfs": noiseGateDBFS = d.noiseGateDBFS
        case "limiter": limiter = d.limiter
        case "high-pass-hz": highPassHz = d.highPassHz
        case "bitrate": bitrate = d.bitrate
        case "complexity": complexity = d.complexity
        case "fec": fec = d.fec
        case "dtx": dtx = d.dtx
        case "frame-ms": frameMS = d.frameMS
        case "instructions": instructions = d.instructions
        case "voice": voice = d.voice
        case "transcription-model": transcriptionModel = d.transcriptionModel
        case "turn-detection": turnDetection = d.turnDetection
        case "max-session-minutes": maxSessionMinutes = d.maxSessionMinutes
        case "max-session-seconds": maxSessionSeconds = d.maxSessionSeconds
        case "max-attempts": maxAttempts = d.maxAttempts
        case "loop-input": loopInput = d.loopInput
        case "openai-url": openaiURL = d.openaiURL
        case "send": send = d.send
        case "events-channel": eventsChannel = d.eventsChannel
        // BEGIN board keys (issue 7)
        case "ptt-required": pttRequired = d.pttRequired
        case "ptt-debounce-ms": pttDebounceMS = d.pttDebounceMS
        case "ptt-long-press-ms": pttLongPressMS = d.pttLongPressMS
        case "leds": leds = d.leds
        case "led-spi": ledSPI = d.ledSPI
        case "led-count": ledCount = d.ledCount
        // END board keys
        default: break
        }
    }

    // MARK: Rules across keys

    /// Checks what no single key can: one route, and options that cannot work without
    /// another. Harmless leftovers (a `ptt-mode` with no button, `agc-target-dbfs` with
    /// AGC off) are allowed, so a higher layer can switch a feature off without unsetting
    /// its tuning; `input` / `output` simply replace `capture` / `playback`.
    public func validate(requireRoute: Bool = true) throws(ConfigError) {
        func at(_ key: String) -> String {
            guard let s = sources[key] else { return key }
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
                switch sources[key] {
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
        // BEGIN board keys (issue 7)
        if pttRequired && ptt == nil {
            throw .conflict("ptt-required needs a button (ptt = GPIO17 or CHIP:OFFSET)", source: sources["ptt-required"])
        }
        if let ptt, leds.contains(ptt) {
            throw .conflict("the LED line \(ptt) is also the push-to-talk button", source: sources["leds"])
        }
        for (i, l) in leds.enumerated() where leds[..<i].contains(l) {
            throw .conflict("the LED line \(l) is listed twice", source: sources["leds"])
        }
        // END board keys
    }

    // MARK: Names

    /// `LINNET_GAIN_DB` → `gain-db`.
    static func keyFromEnvironment(_ name: String) -> String {
        var out: [UInt8] = []
        for b in name.utf8.dropFirst(7) {
            if b == 95 { out.append(45) } else if b >= 65 && b <= 90 { out.append(b + 32) } else { out.append(b) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `gain-db` → `LINNET_GAIN_DB`.
    public static func environmentName(_ key: String) -> String {
        var out = Array("LINNET_".utf8)
        for b in key.utf8 {
            if b == 45 { out.append(95) } else if b >= 97 && b <= 122 { out.append(b - 32) } else { out.append(b) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func unknown(_ key: String, source: ConfigSource) -> ConfigError {
        .unknownKey(key, source: source, suggestion: suggestion(for: key))
    }

    /// The known key nearest to a typo: within two edits (insert, delete, substitute,
    /// swap of neighbours) and fewer edits than half its length; `_` counts as `-`.
    static func suggestion(for key: String) -> String? {
        var typed = Array(key.utf8).map { $0 == 95 ? UInt8(45) : $0 }
        for i in typed.indices where typed[i] >= 65 && typed[i] <= 90 { typed[i] += 32 }
        var best: (key: String, distance: Int)? = nil
        for candidate in keys {
            let d = editDistance(typed, Array(candidate.utf8))
            if d <= 2 && d * 2 < candidate.utf8.count && (best == nil || d < best!.distance) {
                best = (candidate, d)
            }
        }
        return best?.key
    }

    /// Optimal string alignment distance (Damerau–Levenshtein without repeated edits).
    static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        let width = b.count + 1
        var d = [Int](repeating: 0, count: (a.count + 1) * width)
        for i in 0...a.count { d[i * width] = i }
        for j in 0...b.count { d[j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                var v = min(d[(i - 1) * width + j] + 1, d[i * width + j - 1] + 1, d[(i - 1) * width + j - 1] + cost)
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    v = min(v, d[(i - 2) * width + j - 2] + 1)
                }
                d[i * width + j] = v
            }
        }
        return d[a.count * width + b.count]
    }

    // MARK: File values

    /// A value as written after `=`: bare (the rest of the line) or in double quotes.
    static func parseFileValue(_ text: ArraySlice<UInt8>, source: ConfigSource) throws(ConfigError) -> String {
        guard text.first == 34 else { return string(text) }  // '"'
        var out: [UInt8] = []
        var i = text.startIndex + 1
        while i < text.endIndex {
            let c = text[i]
            if c == 34 {
                guard trimmed(text[(i + 1)...]).isEmpty else {
                    throw .syntax("text after the closing quote (comments go on their own line)", source: source)
                }
                return String(decoding: out, as: UTF8.self)
            }
            if c == 92 {  // '\'
                guard i + 1 < text.endIndex else { break }
                switch text[i + 1] {
                case 34: out.append(34)
                case 92: out.append(92)
                case 110: out.append(10)  // \n
                case 116: out.append(9)  // \t
                default:
                    throw .syntax("unknown escape '\\\(string(text[(i + 1)...(i + 1)]))' in quotes (use \\\", \\\\, \\n or \\t)", source: source)
                }
                i += 2
                continue
            }
            out.append(c)
            i += 1
        }
        throw .syntax("missing closing quote", source: source)
    }
}

// MARK: Value parsers

func trimmed(_ s: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
    var s = s
    while let f = s.first, f == 32 || f == 9 { s = s.dropFirst() }
    while let l = s.last, l == 32 || l == 9 || l == 13 { s = s.dropLast() }
    return s
}

func string(_ s: ArraySlice<UInt8>) -> String { String(decoding: s, as: UTF8.self) }

func lowercasedASCII(_ s: String) -> String {
    String(decoding: s.utf8.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }, as: UTF8.self)
}

func boolean(_ value: String, _ bad: (String) -> ConfigError) throws(ConfigError) -> Bool {
    switch lowercasedASCII(value) {
    case "true", "yes", "on", "1": return true
    case "false", "no", "off", "0": return false
    default: throw bad("a boolean (true/false, yes/no, on/off, 1/0)")
    }
}

/// Digits only (no sign, no spaces), within `range`.
func whole(_ value: String, _ range: ClosedRange<Int>, _ error: ConfigError) throws(ConfigError) -> Int {
    var n = 0
    guard !value.isEmpty, value.utf8.count <= 10 else { throw error }
    for b in value.utf8 {
        guard b >= 48 && b <= 57 else { throw error }
        n = n * 10 + Int(b - 48)
    }
    guard range.contains(n) else { throw error }
    return n
}

/// `[-+]digits[.digits]` within `range`; at most 6 fractional digits.
func decimal(_ value: String, _ range: ClosedRange<Int>, _ error: ConfigError) throws(ConfigError) -> Double {
    var bytes = ArraySlice(value.utf8)
    var negative = false
    if let f = bytes.first, f == 45 || f == 43 {
        negative = f == 45
        bytes = bytes.dropFirst()
    }
    var whole: Int64 = 0, fraction: Int64 = 0, scale: Int64 = 1
    var digits = 0, seenPoint = false
    for b in bytes {
        if b == 46 && !seenPoint { seenPoint = true; continue }
        guard b >= 48 && b <= 57 else { throw error }
        digits += 1
        guard digits <= 12 else { throw error }
        if seenPoint {
            guard scale < 1_000_000 else { throw error }
            fraction = fraction * 10 + Int64(b - 48)
            scale *= 10
        } else {
            whole = whole * 10 + Int64(b - 48)
        }
    }
    guard digits > 0 else { throw error }
    var v = Double(whole) + Double(fraction) / Double(scale)
    if negative { v = -v }
    guard v >= Double(range.lowerBound) && v <= Double(range.upperBound) else { throw error }
    return v
}

func choice<T: RawRepresentable & CaseIterable>(_ value: String, _ bad: (String) -> ConfigError) throws(ConfigError) -> T where T.RawValue == String {
    if let v = T(rawValue: lowercasedASCII(value)) { return v }
    var list = ""
    for (i, c) in T.allCases.enumerated() { list += (i == 0 ? "" : ", ") + c.rawValue }
    throw bad("one of \(list)")
}

func url(_ value: String, _ bad: (String) -> ConfigError) throws(ConfigError) -> HTTPURL {
    do throws(HTTPError) {
        return try HTTPURL(value)
    } catch {
        throw bad("an http:// or https:// URL")
    }
}

/// One word: no spaces or control characters (ids, voice and model names).
func token(_ value: String, _ bad: (String) -> ConfigError) throws(ConfigError) -> String {
    guard value.utf8.allSatisfy({ $0 > 32 && $0 != 127 }) else { throw bad("a single word (no spaces)") }
    return value
}

func gpioLine(_ value: String, _ bad: (String) -> ConfigError) throws(ConfigError) -> GPIOLine {
    let expected = "a GPIO line name (GPIO17) or CHIP:OFFSET (gpiochip0:17)"
    guard value.utf8.allSatisfy({ $0 > 32 && $0 != 127 }) else { throw bad(expected) }
    guard let colon = value.lastIndex(of: ":") else { return .name(value) }
    let chip = String(value[..<colon])
    let offsetText = String(value[value.index(after: colon)...])
    guard !chip.isEmpty else { throw bad(expected) }
    let offset = try whole(offsetText, 0...1023, bad(expected))
    return .chip(chip, offset: offset)
}

/// `host:port`, `[v6]:port`, optionally with the `stun:` scheme (RFC 7064).
func hostPort(_ value: String, _ bad: (String) -> ConfigError) throws(ConfigError) -> HostPort {
    let expected = "HOST:PORT (IPv6 in brackets)"
    var text = Substring(value)
    if lowercasedASCII(String(text.prefix(5))) == "stun:" { text = text.dropFirst(5) }
    let host: Substring
    let portText: Substring
    if text.hasPrefix("[") {
        guard let close = text.firstIndex(of: "]") else { throw bad(expected) }
        host = text[text.index(after: text.startIndex)..<close]
        let after = text[text.index(after: close)...]
        guard after.hasPrefix(":") else { throw bad(expected) }
        portText = after.dropFirst()
    } else {
        guard let colon = text.lastIndex(of: ":") else { throw bad(expected) }
        host = text[..<colon]
        guard !host.contains(":") else { throw bad(expected) }
        portText = text[text.index(after: colon)...]
    }
    guard !host.isEmpty, host.utf8.allSatisfy({ $0 > 32 && $0 != 127 && $0 != 47 }) else { throw bad(expected) }
    let port = try whole(String(portText), 1...65_535, bad(expected))
    return HostPort(host: String(host), port: UInt16(port))
}

/// `eth0,wlan0`: names of 1–15 bytes (IFNAMSIZ less the NUL), no spaces or `/`.
func interfaceList(_ value: String, _ bad: (String) -> ConfigError) throws(ConfigError) -> [String] {
    var out: [String] = []
    for part in value.split(separator: ",", omittingEmptySubsequences: false) {
        let name = string(trimmed(ArraySlice(part.utf8)))
        guard !name.isEmpty, name.utf8.count <= 15, name.utf8.allSatisfy({ $0 > 32 && $0 != 127 && $0 != 47 }) else {
            throw bad("a comma list of interface names (eth0,wlan0)")
        }
        out.append(name)
    }
    return out
}
