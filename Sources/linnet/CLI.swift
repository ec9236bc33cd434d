// The command line of docs/CLI.md: dispatch and help. Wiring only; the
// work lives in the modules.
import Wire
import Platform
import Signaling
import Codec
import SRTP
import DTLS
import Devices
import Agent
import Settings
import Runtime

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
/// Exit statuses live with the agent core (Agent/AgentTypes.swift): one rule for every command.
public typealias ExitStatus = Agent.ExitStatus

let linnetVersion = LinnetVersion.string

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

/// One command of CLI.md. Its options are not written here: `linnet help COMMAND` lists
/// the keys the settings table gives it (SettingsTable.optionsHelp), between its prose.
struct CommandEntry: Sendable {
    var name: String
    var synopsis: String
    /// What the command does, before its options.
    var intro: String
    /// Whose rows of the settings table are its options (nil: it takes none).
    var options: Command? = nil
    /// After the options: exit statuses, signals.
    var outro = ""
    /// Nil while the command is not built yet.
    var run: (@Sendable ([String]) -> ExitStatus)?

    /// `linnet help NAME`.
    var help: String {
        var text = "usage: linnet \(synopsis)\n\n\(intro)\n"
        if let options { text += SettingsTable.optionsHelp(for: options) }
        if !outro.isEmpty { text += "\n" + outro + "\n" }
        return text
    }
}

enum CLI {
    static let commands: [CommandEntry] = [
        CommandEntry(name: "run", synopsis: "run [options]", intro: """
            The voice agent; what systemd starts. Keeps a session with the provider for as
            long as it runs: reconnects with backoff, rolls over before the session limit,
            pings the systemd watchdog while the audio pipeline moves. Every option is also
            a config-file key (default /etc/linnet/linnet.conf) and a LINNET_KEY variable;
            flags win over the environment, the environment over the file; an empty value
            (--key=) restores the default.
            """, options: .run, outro: """
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
        CommandEntry(name: "demo", synopsis: "demo [--seconds N]", intro: """
            A whole call on this machine, with no sound card and no backend: the built-in
            answerer (echo) on loopback, real UDP, ICE, DTLS-SRTP, RTP and a data channel;
            a built-in test voice as the microphone; what comes back is written to a WAV
            file. Prints the session's events as JSON lines and exits 0 when audio went
            both ways. Reads flags only (not the config file).
            """, options: .demo, run: { args in DemoCommand.run(args) }),
        CommandEntry(name: "answer", synopsis: "answer --listen HOST:PORT [--mode echo|tone]", intro: """
            Answers WebRTC offers as a provider would: WHIP (POST an application/sdp offer
            to any path → 201 + Location; DELETE the location to end) and the app-backend
            route (POST /voice/CHAT {"sdp": offer} → {"id", "sdp"}; POST
            /voice/CHAT/ID/close → {"seconds"}). Prints READY <port> once listening, and
            runs until SIGINT/SIGTERM unless --seconds says otherwise. Reads flags only.
            """, options: .answer, run: { args in AnswerCommand.run(args) }),
        CommandEntry(name: "audio", synopsis: "audio --input F.wav --output F.wav [hook options]", intro: """
            The audio pipeline with no network: capture conversion, hooks, Opus encode and
            decode, playback. With --input and --output files it runs offline (faster than
            real time); otherwise it runs the real-time threads for --seconds, from --input
            (paced) or the capture device to --output or the playback device. It reads the
            config file and LINNET_* as run does, so its hooks and codec are run's; the
            keys mean what they mean for run.
            Live, what is captured is played back (a call with no network) unless
            --far-end SPEAKER.wav gives the speaker a file to play instead, pulled by the
            playback device as a call's voice is: an echo test, with --aec cancelling it
            against what the speaker really played. --sent FILE.wav records what would be
            sent: the capture after the hooks, encoded and decoded again (what the
            provider hears, Opus' 6.5 ms lookahead included). Combined wrongly (--far-end
            without a playback device, either offline) they are usage errors (64).
            """, options: .audio, run: { args in AudioCommand.run(args) }),
        CommandEntry(name: "tool", synopsis: "tool NAME ['JSON'] [--tools FILE] [--tools-dir DIR]", intro: """
            Runs one tool of the tools file by hand, as the model would call it: the
            arguments (JSON, default none) checked against its schema, then run with its
            timeout, output cap and clean environment; the result on stdout. Exit status:
            0 done; 65 arguments the schema refuses; 69 the tool failed or timed out; 78
            no such tool, or a tools file that cannot be used.
            """, run: { args in ToolCommand.run(args) }),
        CommandEntry(name: "devices", synopsis: "devices", intro: """
            Capture and playback devices (ALSA PCM names, as --capture and --playback take
            them, with the formats, rates and channels of hardware devices) and GPIO chips
            with their named lines (for --ptt).
            """, run: { args in DevicesCommand.run(args) }),
        CommandEntry(name: "check", synopsis: "check [options]", intro: """
            Checks what run would use, one line each: the config (file, LINNET_*
            environment and flags, as run reads them), the token (the file run would read,
            named: token-file, $CREDENTIALS_DIRECTORY/token, or /etc/linnet/token outside
            systemd — use sudo for that one), the capture and playback devices (opened and
            closed again), the push-to-talk line, the STUN server and whether the
            provider's URL answers an OPTIONS request carrying the token (401 or 403:
            check the token). Each line is ok, WARNING (run would carry on: a missing
            button without ptt-required) or FAILED. Exits 0 when no line FAILED, else with
            the first failure's status. Takes run's options.
            """, options: .check, run: { args in CheckCommand.run(args) }),
        CommandEntry(name: "selftest", synopsis: "selftest", intro: """
            In-process checks of every C library and core module: CRC vectors, Opus
            encode/decode of a tone (frequency checked), an SRTP round trip with tamper and
            replay rejection, an ECDSA P-256 certificate and its fingerprint, ALSA's null PCM,
            libgpiod. Exits 0 when all pass, 70 otherwise.
            """, run: { _ in SelfTest.run() }),
        CommandEntry(name: "version", synopsis: "version | --version", intro: "Version, build mode and library versions.", run: { _ in printVersion() }),
        CommandEntry(name: "help", synopsis: "help [COMMAND] | --help", intro: "This help, or one command's.", run: { args in printHelp(args.first) }),
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
        // Command names and flags are compared byte for byte (Wire's `~=` and
        // `bytesEqual`): they are ASCII words, not text to normalise.
        switch first {
        case "--version", "-V": name = "version"
        case "--help", "-h": name = "help"
        default: name = first
        }
        guard let command = commands.first(where: { $0.name.bytesEqual(name) }) else {
            Log.error("unknown command '\(first)'; 'linnet help' lists the commands")
            return .usage
        }
        if args.containsBytes(equalTo: "--help") || args.containsBytes(equalTo: "-h") {
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
            guard let c = commands.first(where: { $0.name.bytesEqual(topic) }) else {
                Log.error("no help for '\(topic)': unknown command")
                return .usage
            }
            writeOut(c.help)
            return .ok
        }
        var text = "linnet \(linnetVersion): a voice agent for Linux single-board computers\n\nusage:\n"
        for c in commands {
            let padded = c.synopsis + String(repeating: " ", count: max(1, 50 - c.synopsis.utf8.count))
            text += "  linnet " + padded + (c.run == nil ? "(not in this build yet)" : "") + "\n"
        }
        text += "\n'linnet help COMMAND' tells more. Exit status: 0 ok, 64 usage, 65 bad data (also an\nanswer that is not usable: not HTTP, not SDP), 69 service or device unavailable (no\nanswer, 5xx), 70 internal error, 74 output failed (the --output recording is\nincomplete), 78 configuration error (also 401/403, certificates).\n"
        writeOut(text)
        return .ok
    }
}
