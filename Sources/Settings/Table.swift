// THE table: every key of every command, once. Order is help's order.
//
// Where `run` and `linnet audio` used to differ (audio had an option system of its own),
// the row keeps what `run` has used: devices in the field run with those values, config
// files hold them, and `audio` exists to show what `run` would do with the same keys.
// - agc-target-dbfs: -40…-1 (audio took -40…-3; a file with -2 must keep working).
// - high-pass-hz: default 80 (audio's 20 let more rumble through than any call gets);
//   0 (off) or 20…1000 (audio took 1…1000 and `--no-high-pass`, which stays as
//   `high-pass-hz = 0`).
// - fec: default on (audio's off made its recordings unlike a call's audio).
// - noise-gate-dbfs: -90…-20 (audio took -90…0), and the gate needs `noise-gate` (audio
//   switched it on by giving a threshold). Likewise AGC needs `agc`.
// - capture-channel: mix or 0…31 (audio's `--channel` took 0…7; it is an alias now).
// - seconds: a whole number ≥ 0 for every command, 0 meaning "until stopped" (demo took
//   1…3600, audio 1…86400, answer 0…31536000); demo and audio still start at 5.
// - stats-seconds: 0…86400 (demo took 0…3600); demo still starts at 1.
// - limiter-dbfs: audio's -30…0, default -1, which is the ceiling run's limiter had
//   fixed; run takes the key too.
import Wire
import Audio
import Signaling

extension SettingsTable {
    public static let rows: [Key] = [
        .optional(configKey, .path(), .config, [.agent, .audio],
                  "the config file (default /etc/linnet/linnet.conf when it exists; also LINNET_CONFIG)") { _, _ in },

        // Route: exactly one of whip, backend + chat, openai + token-url (Config.validate).
        .optional("whip", .url, .route, .agent, "WHIP endpoint (RFC 9725)") { $0.whip = $1 },
        .optional("backend", .url, .route, .agent, "the app backend's voice routes (POST {backend}/voice/{chat}), with chat") { $0.backend = $1 },
        .optional("chat", .word("ID"), .route, .agent, "the chat id of the backend's voice route") { $0.chat = $1 },
        .value("openai", .boolean, .route, .agent, default: "false",
               "OpenAI Realtime directly, with an ephemeral key from token-url") { $0.openai = $1 },
        .optional("token-url", .url, .route, .agent, "where the backend hands out OpenAI ephemeral keys") { $0.tokenURL = $1 },
        .optional("hangup-url", .url, .route, .agent,
                  "where the backend ends an OpenAI call (POST {\"call_id\"} with the token); without it the ephemeral key hangs up while it is valid") {
            $0.hangupURL = $1
        },
        .value("openai-url", .url, .route, .agent, default: "https://api.openai.com/v1/realtime/calls",
               "where OpenAI Realtime calls are created (the ephemeral key is the bearer)") { $0.openaiURL = $1 },

        .optional("token-file", .path(), .credentials, .agent,
                  "bearer token (default $CREDENTIALS_DIRECTORY/token; outside systemd /etc/linnet/token when it exists)") { $0.tokenFile = $1 },
        .optional("ca-file", .path(), .credentials, .agent, "an extra CA (PEM) for a private backend, beside the system bundle") { $0.caFile = $1 },
        .optional("pin-sha256", .pins, .credentials, .agent, "SPKI pins for the signaling host (RFC 7469 pin-sha256, comma list)") { $0.pins = $1 ?? [] },

        .value("capture", .text("PCM", example: "plughw:CARD=Device,DEV=0"), .audioEnds, [.agent, .audio], default: "default",
               "ALSA capture device (none: silence)") { $0.capture = $1 },
        .value("playback", .text("PCM", example: "hw:1,0"), .audioEnds, [.agent, .audio], default: "default",
               "ALSA playback device (none: nothing is played)") { $0.playback = $1 },
        .optional("input", .path("FILE.wav"), .audioEnds, [.agent, .audio],
                  "the microphone from a WAV file instead of capture (paced in real time)") { $0.input = $1 },
        .optional("output", .path("FILE.wav"), .audioEnds, [.agent, .audio, .demo], also: [.demo: "linnet-demo.wav"],
                  "what would be played, to a WAV file instead of playback (exit 74 if it could not all be written)") { $0.output = $1 },
        .optional("reference", .path("SPEAKER.wav"), .audioEnds, .audio,
                  "with input, output and aec: what the speaker played, sample-aligned with input at the start (the echo delay is found)") {
            $0.reference = $1
        },
        .optional("far-end", .path("SPEAKER.wav"), .audioEnds, .audio,
                  "live, with a playback device: the speaker plays this file (converted to the pipeline's rate) instead of the loopback; an echo test") {
            $0.farEnd = $1
        },
        .optional("sent", .path("FILE.wav"), .audioEnds, .audio,
                  "live: what would be sent, to a WAV file (the capture after the hooks, Opus encoded and decoded: what the provider hears)") {
            $0.sent = $1
        },
        .value("loop-input", .boolean, .audioEnds, [.agent, .audio], default: "false", "start input again at its end") { $0.loopInput = $1 },

        .optional("ptt", .gpioLine, .button, .agent,
                  "push-to-talk button; space (on a terminal) and SIGUSR1 toggle talking too (or mute, with an open microphone)") { $0.ptt = $1 },
        .value("ptt-mode", Parser<PTTMode>.oneOf, .button, .agent, default: "hold",
               "talk while held, toggle on each press, or open (the button does not gate the microphone)") { $0.pttMode = $1 },
        .value("ptt-required", .boolean, .button, .agent, default: "false",
               "a button that cannot be opened stops the agent (else a warning, and on without it)") { $0.pttRequired = $1 },
        .value("ptt-debounce-ms", .whole(1...500, "a whole number of milliseconds from 1 to 500", metavar: "MS"), .button, .agent,
               default: "20", "a button level counts once stable this long") { $0.pttDebounceMS = $1 },
        .value("ptt-long-press-ms", .whole(0...60_000, "0 (off) or a whole number of milliseconds from 500 to 60000", metavar: "MS",
                                           valid: { $0 == 0 || $0 >= 500 }), .button, .agent,
               default: "3000", "holding the button this long ends the session or starts a new one (0: off)") { $0.pttLongPressMS = $1 },
        .optional("leds", .gpioLines, .button, .agent, "plain status LEDs on GPIO lines, in order (GPIO5,GPIO6)") { $0.leds = $1 ?? [] },
        .optional("led-spi", .path("DEVICE"), .button, .agent,
                  "a spidev device with APA102 LEDs (the ReSpeaker 2-Mic HAT: /dev/spidev0.0)") { $0.ledSPI = $1 },
        .value("led-count", .whole(1...255, "a whole number of LEDs from 1 to 255"), .button, .agent, default: "3",
               "how many APA102 LEDs are on led-spi") { $0.ledCount = $1 },

        .optional("wake-word", Parser<WakeWordName>.oneOf, .button, .agent,
                  "hands-free: this word starts a push-to-talk turn (an earcon, then the user's words until they stop), with or without a button") {
            $0.wakeWord = $1
        },
        .optional("wake-model", .path("MODEL.tflite"), .button, .agent,
                  "a microWakeWord model of your own instead of wake-word (its .json beside it gives the cutoff and window)") { $0.wakeModel = $1 },
        .value("wake-sensitivity", Parser(metavar: "S", expected: "a number from -0.5 to 0.5", example: "0.1") { v in
                   decimalNumber(v).flatMap { $0 >= -0.5 && $0 <= 0.5 ? $0 : nil }
               }, .button, .agent, default: "0",
               "moves the model's probability cutoff down by this much (more wakes, more false ones) or up (fewer)") { $0.wakeSensitivity = $1 },

        .optional("stun", .hostPort, .network, .agent, "STUN server for server-reflexive candidates") { $0.stun = $1 },
        .optional("ice-server", .iceServers, .network, .agent,
                  "TURN (and STUN) servers, a comma list of turn:host[:port][?transport=udp|tcp], turns:host[:port] or stun:host[:port] URLs") {
            $0.iceServers = $1 ?? []
        },
        .optional("ice-username", .text("NAME", example: "kiosk-17"), .network, .agent, "the TURN servers' username (long-term credentials)") { $0.iceUsername = $1 },
        .optional("ice-credential", .text("SECRET", example: "s3cret"), .network, .agent,
                  "the TURN servers' password (better: ice-credential-file, or the ice-credential systemd credential)") { $0.iceCredential = $1 },
        .value("learned-ice-servers", Parser<LearnedServerReach>.oneOf, .network, .agent, default: "auto",
               "TURN servers the provider's answer names (with their own credentials, never the configured ones): auto uses those no further in than the route's host, internet only public ones, any all, none none") {
            $0.learnedICEServers = $1
        },
        .optional("ice-credential-file", .path(), .network, .agent,
                  "a file holding the TURN password (default $CREDENTIALS_DIRECTORY/ice-credential)") { $0.iceCredentialFile = $1 },
        .value("ice-tcp", .boolean, .network, .agent, default: "true",
               "ICE-TCP: also try the provider's TCP passive candidates (OpenAI's port 443), for networks that block UDP") { $0.iceTCP = $1 },
        .value("ice-transport-policy", Parser<ICETransportPolicy>.oneOf, .network, .agent, default: "all",
               "relay: offer and use only TURN-relayed candidates (all: host and server-reflexive too)") { $0.iceTransportPolicy = $1 },
        .optional("interfaces", .interfaces, .network, .agent,
                  "interfaces to gather on (default: every up, non-loopback one, plus loopback for a loopback signaling host)") {
            $0.interfaces = $1 ?? []
        },

        .optional("instructions", .text("TEXT"), .session, .agent, "the provider's instructions") { $0.instructions = $1 },
        .optional("voice", .word("NAME"), .session, .agent, "the provider's voice") { $0.voice = $1 },
        .optional("transcription-model", .word("NAME"), .session, .agent, "the model that transcribes the user") { $0.transcriptionModel = $1 },
        .optional("turn-detection", Parser<TurnDetectionChoice>.oneOf, .session, .agent,
                  "push-to-talk turns, or the provider's voice detection: vad keeps the session's own kind, server_vad or semantic_vad asks for one (default ptt with a button, else vad)") {
            $0.turnDetection = $1?.mode
            $0.vadType = $1?.vadType
        },
        .optional("vad-threshold", .decimal(0...1, "a number from 0 to 1", metavar: "X"), .session, .agent,
                  "server_vad: how loud speech must be to count (0–1; unset: the session's)") { $0.vadThreshold = $1 },
        .optional("vad-silence-ms", .whole(100...10_000, "a whole number of milliseconds from 100 to 10000", metavar: "MS"), .session, .agent,
                  "server_vad: the silence that ends a turn (unset: the session's)") { $0.vadSilenceMS = $1 },
        .optional("noise-reduction", Parser<NoiseReduction>.oneOf, .session, .agent,
                  "the provider's input noise reduction: near_field, far_field or off (unset: the session's)") { $0.noiseReduction = $1 },
        .value("ptt-tail-ms", .whole(0...2_000, "a whole number of milliseconds from 0 to 2000", metavar: "MS"), .session, .agent,
               default: "200", "a push-to-talk turn is committed this long after the release (the last words are still on their way)") {
            $0.pttTailMS = $1
        },
        .value("carry-turns", .whole(0...100, "a whole number from 0 to 100"), .session, .agent, default: "20",
               "the last N transcript lines a new session (rollover, reconnect) is given, so the assistant remembers (0: none)") {
            $0.carryTurns = $1
        },
        .value("duplex", Parser<Duplex>.oneOf, .session, .agent, default: "auto",
               "voice mode, while the assistant speaks: auto keeps the microphone open (the user can cut in) except while echo is measured to reach it uncancelled, or with a speaker and aec off; full: always open; half: silence is sent") {
            $0.duplex = $1
        },
        .value("barge-in-ms", .whole(0...2_000, "0 (off) or a whole number of milliseconds from 1 to 2000", metavar: "MS"), .session, .agent,
               default: "100", "voice mode with voice-flag: the user's voice held this long over the assistant cuts it at once, and what was heard of the reply is told to the provider (0: only the provider's VAD)") {
            $0.bargeInMS = $1
        },
        .value("max-session-minutes", .whole(1...1440, "a whole number of minutes from 1 to 1440"), .session, .agent, default: "60",
               "the provider's session limit (the agent rolls over to a new session before it)") { $0.maxSessionMinutes = $1 },
        .optional("max-session-seconds", .whole(10...86_400, "a whole number of seconds from 10 to 86400"), .session, .agent,
                  "the session limit in seconds instead (short limits for tests and demos)") { $0.maxSessionSeconds = $1 },
        .value("session", Parser<SessionMode>.oneOf, .session, .agent, default: "always",
               "always: a provider session from start to stop; on-demand: none until the button is pressed (what is said from the press on is kept and sent once it connects), closed after idle-seconds") {
            $0.sessionMode = $1
        },
        .value("idle-seconds", .whole(5...3_600, "a whole number of seconds from 5 to 3600"), .session, .agent, default: "30",
               "session on-demand: the session closes after this long with no speech either way") { $0.idleSeconds = $1 },
        .optional("max-daily-minutes", .whole(1...1440, "a whole number of minutes from 1 to 1440"), .session, .agent,
                  "connected minutes a local day: once reached, no session starts until the next day (kept in state-dir across restarts)") {
            $0.maxDailyMinutes = $1
        },
        .optional("max-daily-tokens", .whole(1...1_000_000_000, "a whole number of tokens from 1 to 1000000000"), .session, .agent,
                  "the provider's tokens (input and output) a local day: once reached, no session starts until the next day") {
            $0.maxDailyTokens = $1
        },
        .value("events-channel", .label("LABEL", limit: 1024), .session, .agent, default: "oai-events",
               "the label of the data channel the provider's events ride on") { $0.eventsChannel = $1 },
        .optional("send", .path(), .session, .agent, "text lines to send on the events channel once it is open") { $0.send = $1 },
        .optional("tools", .path(), .session, .agent,
                  "the function tools file (JSON) the model may call: GPIO lines, programs in tools-dir, HTTP endpoints (README: tools)") { $0.tools = $1 },
        .value("tools-dir", .path("DIR"), .session, .agent, default: "/etc/linnet/tools.d",
               "where the tools file's exec programs are (named by file name; no path comes from the model)") { $0.toolsDir = $1 },

        .value("seconds", .whole(0...Int(Int32.max), "a whole number of seconds from 0 to 2147483647"), .running, [.agent, .demo, .audio, .answer],
               default: "0", also: [.demo: "5", .audio: "5"],
               "stop cleanly after N seconds (run: of being connected; 0: until stopped)") { $0.seconds = $1 },
        .value("max-attempts", .whole(0...1_000_000, "a whole number ≥ 0 (0: retry forever)"), .running, .agent, default: "0",
               "give up after N failed attempts in a row, or sooner when the waits between them would pass 30 s per retry (a long Retry-After, 401/403); 0: never") {
            $0.maxAttempts = $1
        },
        .optional("events", .path(), .running, [.agent, .demo], also: [.demo: "-"],
                  "states, transcripts, stats and messages as JSON lines (-: standard output)") { $0.events = $1 },
        .optional("events-label", .text("TEXT", example: "kitchen"), .running, .agent,
                  "a label on every event line (tells devices apart in fleet logs)") { $0.eventsLabel = $1 },
        .value("stats-seconds", .whole(0...86_400, "a whole number of seconds from 0 to 86400"), .running, [.agent, .demo],
               default: "0", also: [.demo: "1"], "a stats line every N seconds (0: only at the end)") { $0.statsSeconds = $1 },
        .optional("state-dir", .path("DIR"), .running, .agent,
                  "where run keeps what must outlive it (the provider sessions open now, closed at the next start if the process is killed with them open); default $STATE_DIRECTORY under systemd (/var/lib/linnet)") {
            $0.stateDir = $1
        },
        .optional("status-file", .path(), .running, .agent,
                  "the state as JSON for a kiosk UI (default /run/linnet/status.json when /run/linnet is writable)") { $0.statusFile = $1 },
        .optional("textfile-dir", .path(), .running, .agent,
                  "writes linnet.prom there for node_exporter's textfile collector (default /var/lib/prometheus/node-exporter when Linnet can write it)") { $0.textfileDir = $1 },
        .value("log-level", .logLevel, .running, [.agent, .demo, .audio, .answer], default: "info", "what is logged") { $0.logLevel = $1 },
        .value("service-user", .word("USER"), .running, .check, default: "linnet",
               "run by root, check becomes this user (the unit's User=) with the unit's groups audio gpio spi, and checks what the service could open") {
            $0.serviceUser = $1
        },

        // The capture hooks, in the chain's order (AudioSetup builds it from these).
        .value("rate", .oneOf([16_000, 24_000, 48_000]), .hooks, [.agent, .audio], default: "48000",
               "the pipeline's sample rate (all Opus rates)") { $0.rate = $1 },
        .value("capture-channel", .captureChannel, .hooks, [.agent, .audio], default: "mix", aliases: [Alias("channel")],
               "the device channel that becomes the voice, 0 the left of a stereo HAT (mix: their average)") { $0.captureChannel = $1 },
        .value("aec", .autoBoolean, .hooks, [.agent, .audio], default: "auto",
               "auto: on with a speaker and a microphone (off with output/input files or none); acoustic echo cancellation (speexdsp MDF, at 16 kHz: what is sent is then band-limited to 7.2 kHz and 3 ms later at 48 kHz) against what the speaker plays; the echo delay is found") { $0.aecChoice = $1 },
        .value("aec-filter-ms", .whole(20...1000, "a whole number of milliseconds from 20 to 1000", metavar: "MS"), .hooks, [.agent, .audio],
               default: "250", "the room tail the echo canceller models, after the delay") { $0.aecFilterMS = $1 },
        .value("aec-suppress-db", .whole(0...60, "0 (off) or a whole number of dB from 1 to 60", metavar: "DB"), .hooks, [.agent, .audio],
               default: "40", "with aec: the residual echo suppressor behind the canceller, its attenuation (0: off; adds 10 ms)") {
            $0.aecSuppressDB = $1
        },
        .value("noise-suppress-db", .whole(0...60, "0 (off) or a whole number of dB from 1 to 60", metavar: "DB"), .hooks, [.agent, .audio],
               default: "0", "noise suppression (speexdsp preprocessor): how far stationary noise is lowered (0: off)") { $0.noiseSuppressDB = $1 },
        .value("voice-flag", .autoBoolean, .hooks, [.agent, .audio], default: "auto",
               "a voice-activity flag from the speexdsp preprocessor, which cuts the assistant when the user talks over it (barge-in-ms); auto: on behind aec and in run's voice mode unless half duplex (audio reports it)") { $0.voiceFlagChoice = $1 },
        .value("high-pass-hz", .whole(0...1000, "0 (off) or a frequency from 20 to 1000 Hz", metavar: "HZ", valid: { $0 == 0 || $0 >= 20 }),
               .hooks, [.agent, .audio], default: "80", aliases: [Alias("no-high-pass", value: "0")],
               "DC and rumble removal, its corner (0: off)") { $0.highPassHz = $1 },
        .value("gain-db", .decimal(-40...40, "a number of dB from -40 to 40", metavar: "DB"), .hooks, [.agent, .audio], default: "0",
               "fixed gain before the other hooks") { $0.gainDB = $1 },
        .value("agc", .boolean, .hooks, [.agent, .audio], default: "false", "automatic gain control") { $0.agc = $1 },
        .value("agc-target-dbfs", .decimal(-40...(-1), "a level in dBFS from -40 to -1", metavar: "DBFS"), .hooks, [.agent, .audio],
               default: "-18", "the level AGC steers speech to") { $0.agcTargetDBFS = $1 },
        .value("noise-gate", .boolean, .hooks, [.agent, .audio], default: "false", "a noise gate") { $0.noiseGate = $1 },
        .value("noise-gate-dbfs", .decimal(-90...(-20), "a level in dBFS from -90 to -20", metavar: "DBFS"), .hooks, [.agent, .audio],
               default: "-50", "below this level the gate closes") { $0.noiseGateDBFS = $1 },
        .value("limiter", .boolean, .hooks, [.agent, .audio], default: "true", "a limiter, so gain and AGC never clip") { $0.limiter = $1 },
        .value("limiter-dbfs", .decimal(-30...0, "a level in dBFS from -30 to 0", metavar: "DBFS"), .hooks, [.agent, .audio],
               default: "-1", "the limiter's ceiling") { $0.limiterDBFS = $1 },

        .value("bitrate", .whole(6000...510_000, "a bitrate from 6000 to 510000 bit/s", metavar: "BPS"), .codec, [.agent, .audio],
               default: "32000", "target bitrate") { $0.bitrate = $1 },
        // Default 10, libopus' own (measured by bench/opus-quality.py and bench/audio.sh):
        // at 5 a recogniser lost words of the uplink; 8–10 measure alike in libopus 1.3.1
        // (+0.6 dB SNR, −0.6 dB spectral distortion over 5) at ~150 M instructions/s,
        // ~15 % of one of a Pi Zero 2 W's four A53 cores.
        .value("complexity", .whole(0...10, "a whole number from 0 to 10"), .codec, [.agent, .audio], default: "10",
               example: "5", "Opus encoder complexity (10: clearest speech; lower saves CPU on a busy board)") { $0.complexity = $1 },
        .value("fec", .boolean, .codec, [.agent, .audio], default: "true", "in-band forward error correction") { $0.fec = $1 },
        .value("dtx", .boolean, .codec, [.agent, .audio], default: "false", "discontinuous transmission in silence") { $0.dtx = $1 },
        // Parsed and kept, not yet honoured: the audio path frames 20 ms (the duplex
        // audio work reads it).
        .value("frame-ms", .whole(0...1000, "10 or 20", metavar: "10|20", valid: { $0 == 10 || $0 == 20 }), .codec, [.agent, .audio],
               default: "20", example: "10", "frame duration: each Opus packet and RTP step (48 × frame-ms ticks)") { $0.frameMS = $1 },

        .value("pace", .boolean, .audioEnds, .audio, default: "false",
               "pace devices in Linnet (ALSA null and file plugins run on no clock)") { $0.pace = $1 },

        .optional("listen", .socketAddress, .answer, .answer, "address to listen on (port 0: any free port)") { $0.listen = $1 },
        .optional("advertise", .ipAddresses, .answer, .answer,
                  "public addresses of this host behind a one-to-one NAT (its UDP ports forwarded as they are): offered as candidates beside the local ones") {
            $0.advertise = $1 ?? []
        },
        .value("mode", Parser<AnswerMode>.oneOf, .answer, .answer, default: "echo",
               "echo sends back what it receives, tone a 440 Hz tone") { $0.answerMode = $1 },
    ]
}
