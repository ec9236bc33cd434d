// The command line of ../shared/design/CLI.md: dispatch and help. Wiring only; the
// work lives in the modules.
import Platform
import Codec
import SRTP
import DTLS
import Devices
import Agent

/// Exit statuses (sysexits.h), as CLI.md fixes them.
///
/// For the provider (run with max-attempts, and check) one rule, whatever the layer:
/// - 65 `dataError`: an answer came and is not usable data — bytes that are not HTTP
///   (a bad status line or header, a chunk size, headers or body over the limit), a
///   body that is not the SDP or JSON the route expects, an SDP answer that cannot be
///   applied, a redirect that cannot be followed.
/// - 69 `unavailable`: no answer — DNS, refused, reset, timed out, closed before the
///   response was complete, TLS that did not come up (other than a certificate) — or a
///   provider that answers it cannot (5xx, 404, …), or a call whose ICE/DTLS failed.
/// - 78 `config`: what a person must fix — 401/403 (the token), a certificate or CA
///   that does not verify.
/// Exit statuses live with the agent core (Agent/AgentCore.swift): one rule for every command.
typealias ExitStatus = Agent.ExitStatus

extension HTTPClientError {
    /// This failure's exit status by the rule above.
    var exitStatus: ExitStatus {
        if isConfigurationProblem { return .config }
        switch self {
        case .http(.truncated): return .unavailable
        case .http: return .dataError
        default: return .unavailable
        }
    }
}

let linnetVersion = "0.1.0"

#if hasFeature(Embedded)
let buildMode = "embedded"
#else
let buildMode = "full"
#endif

#if arch(arm64)
let buildArch = "aarch64"
#elseif arch(x86_64)
let buildArch = "x86_64"
#else
let buildArch = "unknown"
#endif

struct Command: Sendable {
    let name: String
    let synopsis: String
    let help: String
    /// Nil while the command is not built yet.
    let run: (@Sendable ([String]) -> ExitStatus)?
}

enum CLI {
    static let commands: [Command] = [
        Command(name: "run", synopsis: "run [options]", help: """
            The voice agent; what systemd starts. Keeps a session with the provider for as
            long as it runs: reconnects with backoff, rolls over before the session limit,
            pings the systemd watchdog while the audio pipeline moves. Every option is also
            a config-file key (default /etc/linnet/linnet.conf) and a LINNET_KEY variable;
            flags win over the environment, the environment over the file.
              --config FILE            the config file
              --whip URL               WHIP endpoint (RFC 9725)
              --backend URL --chat ID  the app backend's voice routes
              --openai --token-url URL OpenAI Realtime, the ephemeral key from the backend
              --token-file FILE        bearer token (default $CREDENTIALS_DIRECTORY/token;
                                       outside systemd /etc/linnet/token when it exists)
              --ca-file FILE           an extra CA (PEM) for a private backend
              --capture PCM            ALSA capture device (default "default"; none: silence)
              --playback PCM           ALSA playback device (default "default"; none)
              --input FILE.wav         the microphone from a file (paced; --loop-input repeats it)
              --output FILE.wav        what would be played, to a file (exit 74 if it
                                       could not all be written: a full disk)
              --ptt LINE --ptt-mode hold|toggle|open
                                       push-to-talk button; space (on a terminal) and SIGUSR1
                                       toggle talking too (or mute, with an open microphone)
              --turn-detection ptt|vad push-to-talk turns, or the provider's voice detection
              --instructions TEXT --voice NAME --transcription-model NAME
              --events FILE            states, transcripts, stats, messages as JSON lines ("-": stdout)
              --stats-seconds N        a stats line every N seconds
              --status-file FILE       the state as JSON for a kiosk UI (default /run/linnet/status.json)
              --seconds N              end cleanly N seconds after connecting (0: run forever)
              --max-attempts N         give up after N failed attempts in a row, or sooner when
                                       the waits between them would pass 30 s per retry
                                       (a long Retry-After, 401/403); 0: never
              --max-session-minutes N  the provider's session limit (rollover before it)
              --send FILE              text lines to send on the events channel once open
              --stun HOST:PORT         STUN server for server-reflexive candidates
              --interfaces NAMES       comma list of interfaces to gather on
              --log-level LEVEL        error, warn, info (default) or debug
            Hook and codec keys (rate, gain-db, agc, noise-gate, limiter, high-pass-hz,
            bitrate, complexity, fec, dtx) are as in 'linnet help audio'.
            Exit status (with --seconds or --max-attempts, or when it cannot start): 0 a
            clean end; 65 the provider's answer is not usable data (not HTTP, not the SDP
            or JSON expected, an SDP that cannot be applied); 69 no answer (unreachable,
            refused, timed out), a 5xx or other refusal, a call whose ICE/DTLS failed, or a
            missing device; 78 configuration: the config, 401/403 (check the token), a
            certificate that does not verify; 74 the --output recording is incomplete; 64 a
            bad flag; 70 an internal error.
            SIGTERM, SIGINT and SIGHUP stop it cleanly (SIGHUP is a stop, not a reload);
            SIGUSR1 toggles talking or mute.
            """, run: { args in RunCommand.run(args) }),
        Command(name: "demo", synopsis: "demo [--seconds N]", help: """
            A whole call on this machine, with no sound card and no backend: the built-in
            answerer (echo) on loopback, real UDP, ICE, DTLS-SRTP, RTP and a data channel;
            a built-in test voice as the microphone; what comes back is written to a WAV
            file. Prints the session's events as JSON lines and exits 0 when audio went
            both ways.
              --seconds N        length of the call once connected (default 5)
              --output FILE.wav  where the returned audio goes (default linnet-demo.wav)
              --events FILE      events to a file instead of standard output
            """, run: { args in DemoCommand.run(args) }),
        Command(name: "answer", synopsis: "answer --listen HOST:PORT [--mode echo|tone]", help: """
            Answers WebRTC offers as a provider would: WHIP (POST an application/sdp offer
            to any path → 201 + Location; DELETE the location to end) and the app-backend
            route (POST /voice/CHAT {"sdp": offer} → {"id", "sdp"}; POST
            /voice/CHAT/ID/close → {"seconds"}). --mode echo sends back what it receives;
            tone sends a 440 Hz tone. Prints READY <port> once listening.
              --listen HOST:PORT   address to listen on (port 0: any free port)
              --mode echo|tone     what to send (default echo)
              --seconds N          stop after N seconds (default: until SIGINT/SIGTERM)
              --log-level LEVEL    error, warn, info (default) or debug
            """, run: { args in AnswerCommand.run(args) }),
        Command(name: "audio", synopsis: "audio --input F.wav --output F.wav [hook options]", help: """
            The audio pipeline with no network: capture conversion, hooks, Opus encode and
            decode, playback. With --input and --output files it runs offline (faster than
            real time); with --capture PCM and/or --playback PCM it runs the real-time
            threads for --seconds N (default 5).
              --rate 48000|24000|16000   pipeline rate (default 48000)
              --channel K                device channel to use (default: average them)
              --high-pass-hz HZ          DC removal cutoff (default 20) | --no-high-pass
              --gain-db DB               fixed gain, -40 to 40
              --agc | --agc-target-dbfs DBFS   automatic gain control (target -18)
              --noise-gate-dbfs DBFS     noise gate threshold
              --limiter-dbfs DBFS        limiter ceiling (default -1) | --no-limiter
              --bitrate BPS --complexity 0-10 --fec --dtx   Opus settings
              --pace                     pace devices in Linnet (for ALSA null/file plugins)
            """, run: { args in AudioCommand.run(args) }),
        Command(name: "devices", synopsis: "devices", help: """
            Capture and playback devices (ALSA PCM names, as --capture and --playback take
            them, with the formats, rates and channels of hardware devices) and GPIO chips
            with their named lines (for --ptt).
            """, run: { args in DevicesCommand.run(args) }),
        Command(name: "check", synopsis: "check [options]", help: """
            Checks what run would use, one line each: the config (file, LINNET_*
            environment and flags, as run reads them), the token (the file run would read,
            named: token-file, $CREDENTIALS_DIRECTORY/token, or /etc/linnet/token outside
            systemd — use sudo for that one), the capture and playback devices (opened and
            closed again), the push-to-talk line, the STUN server and whether the
            provider's URL answers an OPTIONS request carrying the token (401 or 403:
            check the token). Each line is ok, WARNING (run would carry on: a missing
            button without ptt-required) or FAILED. Exits 0 when no line FAILED, else with
            the first failure's status. Takes run's options.
            """, run: { args in CheckCommand.run(args) }),
        Command(name: "selftest", synopsis: "selftest", help: """
            In-process checks of every C library and core module: CRC vectors, Opus
            encode/decode of a tone (frequency checked), an SRTP round trip with tamper and
            replay rejection, an ECDSA P-256 certificate and its fingerprint, ALSA's null PCM,
            libgpiod. Exits 0 when all pass, 70 otherwise.
            """, run: { _ in SelfTest.run() }),
        Command(name: "version", synopsis: "version | --version", help: "Version, build mode and library versions.", run: { _ in printVersion() }),
        Command(name: "help", synopsis: "help [COMMAND] | --help", help: "This help, or one command's.", run: { args in printHelp(args.first) }),
    ]

    static func main(_ argv: [String]) -> ExitStatus {
        // Before any thread exists (dispositions are process-wide): a closed pipe or a
        // file-size limit becomes a write error each output handles, not a death.
        ProcessSignals.ignoreWriteSignals()
        var args = Array(argv.dropFirst())
        guard let first = args.first else {
            _ = printHelp(nil)
            return .usage
        }
        args.removeFirst()
        let name: String
        switch first {
        case "--version", "-V": name = "version"
        case "--help", "-h": name = "help"
        default: name = first
        }
        guard let command = commands.first(where: { $0.name == name }) else {
            Log.error("unknown command '\(first)'; 'linnet help' lists the commands")
            return .usage
        }
        if args.contains("--help") || args.contains("-h") {
            return printHelp(name)
        }
        guard let run = command.run else {
            Log.error("'\(name)' is not in this build yet (version \(linnetVersion)); 'linnet help' lists what this build has")
            return .usage
        }
        return run(args)
    }

    static func printVersion() -> ExitStatus {
        writeOut("""
            linnet \(linnetVersion) (\(buildMode) Swift, \(buildArch))
            opus     \(opusVersion)
            alsa     \(alsaVersion)
            srtp     \(srtpVersion)
            mbedtls  \(mbedtlsVersion)
            gpiod    \(gpiodVersion)

            """)
        return .ok
    }

    static func printHelp(_ topic: String?) -> ExitStatus {
        if let topic {
            guard let c = commands.first(where: { $0.name == topic }) else {
                Log.error("no help for '\(topic)': unknown command")
                return .usage
            }
            writeOut("usage: linnet \(c.synopsis)\n\n\(c.help)\n")
            return .ok
        }
        var text = "linnet \(linnetVersion): a voice agent for Linux single-board computers\n\nusage:\n"
        for c in commands {
            let padded = c.synopsis + String(repeating: " ", count: max(1, 50 - c.synopsis.count))
            text += "  linnet " + padded + (c.run == nil ? "(not in this build yet)" : "") + "\n"
        }
        text += "\n'linnet help COMMAND' tells more. Exit status: 0 ok, 64 usage, 65 bad data (also an\nanswer that is not usable: not HTTP, not SDP), 69 service or device unavailable (no\nanswer, 5xx), 70 internal error, 74 output failed (the --output recording is\nincomplete), 78 configuration error (also 401/403, certificates).\n"
        writeOut(text)
        return .ok
    }
}
