import Testing
import ICE
import Wire
import Signaling
@testable import Settings

/// A route so that `load` validates; most tests are about other keys.
let route = "whip = https://whip.example.net/whip\n"

func load(_ text: String?, env: [TextKey: String] = [:], args: [String] = [], requireRoute: Bool = true) throws(ConfigError) -> Config {
    try Config.load(file: text.map { ("linnet.conf", $0) }, environment: env, arguments: args, requireRoute: requireRoute)
}

/// The error `body` throws, as its message.
func message(_ body: () throws(ConfigError) -> Config) -> String? {
    do throws(ConfigError) {
        _ = try body()
        return nil
    } catch {
        return error.description
    }
}

@Suite struct ConfigFileTests {
    @Test("defaults")
    func defaults() throws {
        let c = try load(nil, requireRoute: false)
        #expect(c == Config())
        #expect(c.capture == "default" && c.playback == "default")
        #expect(c.seconds == 0 && c.logLevel == .info && c.pttMode == .hold && c.interfaces.isEmpty)
        #expect(c.rate == 48_000 && c.frameMS == 20 && c.bitrate == 32_000 && c.complexity == 10)
        #expect(c.fec && !c.dtx && c.limiter && !c.agc && !c.noiseGate && c.highPassHz == 80)
        #expect(c.gainDB == 0 && c.agcTargetDBFS == -18 && c.noiseGateDBFS == -50)
        #expect(c.maxSessionMinutes == 60 && c.statsSeconds == 0 && c.captureChannel == .mix)
        #expect(c.effectiveTurnDetection == .vad && c.sources.isEmpty)
    }

    @Test("every key, one file")
    func everyKey() throws {
        let text = """
        # Linnet, kitchen intercom
        ; both comment styles

        backend = https://api.example.net:8443/v1
        chat = chat-42
        token-file = /run/credentials/linnet/token
        ca-file = /etc/linnet/backend-ca.pem
        pin-sha256 = 2N3aE8oX2pfL6ab9+BDIAqupIyKdJUkpIhFn52swpUw=, br531uv0N6g9pZfniIwxGEcsM06n5CEI99+ToofJEGM=
        capture = plughw:CARD=seeed2micvoicec,DEV=0
        playback = "hw:1,0"
        input = /tmp/in.wav
        output = /tmp/out.wav
        ptt = gpiochip0:17
        ptt-mode = toggle
        events = -
        events-label = kitchen
        seconds = 3600
        stun = stun:stun.example.net:3478
        interfaces = eth0, wlan0
        log-level = debug
        stats-seconds = 30
        status-file = /run/linnet/status
        rate = 16000
        capture-channel = 1
        gain-db = -3.5
        agc = yes
        agc-target-dbfs = -20
        noise-gate = on
        noise-gate-dbfs = -55.25
        limiter = false
        limiter-dbfs = -3.5
        high-pass-hz = 120
        bitrate = 24000
        complexity = 3
        fec = 0
        dtx = 1
        frame-ms = 10
        instructions = "You are a kitchen intercom.\\nBe brief; say \\"done\\" at the end."
        voice = verse
        transcription-model = gpt-4o-mini-transcribe
        turn-detection = ptt
        ptt-tail-ms = 150
        vad-threshold = 0.6
        vad-silence-ms = 700
        noise-reduction = far_field
        hangup-url = https://api.example.net:8443/v1/hangup
        carry-turns = 8
        max-session-minutes = 30
        max-session-seconds = 90
        max-daily-minutes = 120
        max-daily-tokens = 250000
        session = on-demand
        idle-seconds = 45
        max-attempts = 5
        loop-input = yes
        openai-url = http://127.0.0.1:9/v1/realtime/calls
        send = /tmp/lines.txt
        tools = /etc/linnet/tools.json
        tools-dir = /opt/door/tools
        textfile-dir = /var/lib/node-exporter
        events-channel = kitchen-events
        aec = true
        aec-filter-ms = 300
        aec-suppress-db = 30
        noise-suppress-db = 12
        voice-flag = yes
        duplex = full
        barge-in-ms = 300
        ice-server = turn:turn.example.net:3478?transport=tcp, turns:turn.example.net, stun:[2001:db8::1]:3479
        ice-username = kiosk-17
        ice-credential = s3cret
        ice-credential-file = /run/credentials/linnet/ice-credential
        ice-transport-policy = relay
        ice-tcp = false
        learned-ice-servers = internet
        state-dir = /var/lib/linnet
        wake-word = hey_jarvis
        wake-sensitivity = 0.1
        """
        let c = try load(text)
        #expect(c.backend == (try HTTPURL("https://api.example.net:8443/v1")))
        #expect(c.backend?.port == 8443 && c.chat == "chat-42")
        #expect(c.tokenFile == "/run/credentials/linnet/token" && c.caFile == "/etc/linnet/backend-ca.pem")
        #expect(c.pins.map(\.description) == ["2N3aE8oX2pfL6ab9+BDIAqupIyKdJUkpIhFn52swpUw=", "br531uv0N6g9pZfniIwxGEcsM06n5CEI99+ToofJEGM="])
        #expect(c.capture == "plughw:CARD=seeed2micvoicec,DEV=0" && c.playback == "hw:1,0")
        #expect(c.input == "/tmp/in.wav" && c.output == "/tmp/out.wav")
        #expect(c.ptt == .chip("gpiochip0", offset: 17) && c.pttMode == .toggle)
        #expect(c.events == "-" && c.eventsLabel == "kitchen" && c.seconds == 3600)
        #expect(c.stun == HostPort(host: "stun.example.net", port: 3478))
        #expect(c.interfaces == ["eth0", "wlan0"] && c.logLevel == .debug)
        #expect(c.statsSeconds == 30 && c.statusFile == "/run/linnet/status")
        #expect(c.rate == 16_000 && c.captureChannel == .index(1))
        #expect(c.gainDB == -3.5 && c.agc && c.agcTargetDBFS == -20)
        #expect(c.noiseGate && c.noiseGateDBFS == -55.25 && !c.limiter && c.limiterDBFS == -3.5 && c.highPassHz == 120)
        #expect(c.bitrate == 24_000 && c.complexity == 3 && !c.fec && c.dtx && c.frameMS == 10)
        #expect(c.instructions == "You are a kitchen intercom.\nBe brief; say \"done\" at the end.")
        #expect(c.voice == "verse" && c.transcriptionModel == "gpt-4o-mini-transcribe")
        #expect(c.turnDetection == .ptt && c.effectiveTurnDetection == .ptt && c.maxSessionMinutes == 30)
        #expect(c.vadThreshold == 0.6 && c.vadSilenceMS == 700 && c.noiseReduction == .far_field)
        #expect(c.pttTailMS == 150 && c.carryTurns == 8 && c.hangupURL?.target == "/v1/hangup")
        #expect(c.sources["gain-db"] == .file(path: "linnet.conf", line: 25))
        #expect(c.maxSessionSeconds == 90 && c.maximumSessionSeconds == 90 && c.maxAttempts == 5 && c.loopInput)
        #expect(c.openaiURL.port == 9 && c.send == "/tmp/lines.txt" && c.eventsChannel == "kitchen-events")
        #expect(c.tools == "/etc/linnet/tools.json" && c.toolsDir == "/opt/door/tools" && c.textfileDir == "/var/lib/node-exporter")
        #expect(c.maxDailyMinutes == 120 && c.maxDailyTokens == 250_000)
        #expect(c.sessionMode == .onDemand && c.idleSeconds == 45)
        #expect(c.aec && c.aecFilterMS == 300 && c.aecSuppressDB == 30 && c.noiseSuppressDB == 12 && c.voiceFlag)
        #expect(c.duplex == .full && c.micHold == .never && c.bargeInMS == 300)
        #expect(c.iceServers.map(\.description) == ["turn:turn.example.net:3478?transport=tcp", "turns:turn.example.net:5349", "stun:[2001:db8::1]:3479"])
        #expect(c.iceServers.map(\.transport) == [.tcp, .tls, .udp])
        #expect(c.iceUsername == "kiosk-17" && c.iceCredential == "s3cret" && c.iceCredentialFile == "/run/credentials/linnet/ice-credential")
        #expect(c.iceTransportPolicy == .relay && !c.iceTCP && c.learnedICEServers == .internet)
        #expect(c.stateDir == "/var/lib/linnet")
        #expect(c.wakeWord == .hey_jarvis && c.wakeSensitivity == 0.1 && c.wakeEnabled)
        // Every key of the table was exercised (the route keys whip/openai/token-url elsewhere).
        // (The board keys are exercised in BoardConfigTests.)
        #expect(Set(c.sources.keys.map(\.text)).union(["whip", "openai", "token-url"]).union(boardKeys) == Set(Config.keys))
    }

    @Test("the other routes: whip, and openai with token-url")
    func routes() throws {
        let w = try load(route)
        #expect(w.whip?.host == "whip.example.net" && w.whip?.secure == true && w.whip?.target == "/whip")
        let o = try load("openai = true\ntoken-url = http://127.0.0.1:8080/token\n")
        #expect(o.openai && o.tokenURL?.port == 8080 && o.tokenURL?.secure == false)
    }

    @Test("comments, blank lines, indentation, CRLF and a byte order mark")
    func layout() throws {
        let text = "\u{FEFF}# first\r\n\r\n   ; indented comment\r\n\tseconds\t=\t7  \r\n" + route + "   \n#last"
        let c = try load(text)
        #expect(c.seconds == 7)
        #expect(c.sources["seconds"] == .file(path: "linnet.conf", line: 4))
    }

    @Test("quoting: spaces, # and ; kept, escapes, empty quotes reset")
    func quoting() throws {
        let c = try load(route + #"""
        instructions = "  two spaces # not a comment ; nor this  "
        voice = "a\\b"
        events-label = "say \"hi\"\tthen"
        capture = ""
        """#)
        #expect(c.instructions == "  two spaces # not a comment ; nor this  ")
        #expect(c.voice == "a\\b")
        #expect(c.eventsLabel == "say \"hi\"\tthen")
        #expect(c.capture == "default" && c.sources["capture"] == nil)
        // A bare value keeps inner quotes and '#'.
        let d = try load(route + "instructions = say \"x\" # y\n")
        #expect(d.instructions == "say \"x\" # y")
    }

    @Test("quoting errors", arguments: [
        ("voice = \"open", "linnet.conf:2: missing closing quote"),
        ("voice = \"a\" # comment", "linnet.conf:2: text after the closing quote (comments go on their own line)"),
        ("voice = \"a\\qb\"", "linnet.conf:2: unknown escape '\\q' in quotes (use \\\", \\\\, \\n or \\t)"),
        ("voice = \"ends in backslash\\", "linnet.conf:2: missing closing quote"),
    ])
    func quotingErrors(line: String, expected: String) {
        #expect(message { () throws(ConfigError) in try load(route + line) } == expected)
    }

    @Test("the messages of the brief")
    func briefMessages() {
        let eleven = String(repeating: "# padding\n", count: 10)
        #expect(message { () throws(ConfigError) in try load(route + eleven + "gian-db = 3") }
                == "linnet.conf:12: unknown key 'gian-db' (did you mean 'gain-db'?)")
        #expect(message { () throws(ConfigError) in try load(route + "\nseconds = -5") }
                == "linnet.conf:3: seconds: '-5' is not a whole number of seconds from 0 to 2147483647")
    }

    @Test("syntax errors name the line", arguments: [
        ("just words", "linnet.conf:2: expected 'key = value', found 'just words'"),
        // A secret is never echoed, even from a line that does not parse.
        ("ice-credential TOPSECRET1", "linnet.conf:2: expected 'key = value', found 'ice-credential … (the rest is not shown: it may be the secret)'"),
        ("ice-credentail: TOPSECRET1", "linnet.conf:2: expected 'key = value', found 'ice-credentail … (the rest is not shown: it may be the secret)'"),
        (" = 5", "linnet.conf:2: missing key before '='"),
        ("config = /etc/other.conf", "linnet.conf:2: 'config' cannot be set inside the config file (use --config or LINNET_CONFIG)"),
        ("seconds = 5 # five", "linnet.conf:2: seconds: '5 # five' is not a whole number of seconds from 0 to 2147483647"),
        ("Seconds = 5", "linnet.conf:2: unknown key 'Seconds' (did you mean 'seconds'?)"),
        ("gain_db = 1", "linnet.conf:2: unknown key 'gain_db' (did you mean 'gain-db'?)"),
        ("volume = 11", "linnet.conf:2: unknown key 'volume'"),
    ])
    func syntax(line: String, expected: String) {
        #expect(message { () throws(ConfigError) in try load(route + line) } == expected)
    }

    @Test("a key twice in the file is an error")
    func duplicate() {
        #expect(message { () throws(ConfigError) in try load(route + "seconds = 1\n\nseconds = 2") }
                == "linnet.conf:4: 'seconds' is already set on line 2")
    }
}

@Suite struct ConfigValueTests {
    /// Good values of each kind and what they become.
    @Test("value kinds: accepted forms")
    func accepted() throws {
        func c(_ line: String) throws -> Config { try load(route + line) }
        for (text, expected) in [("true", true), ("YES", true), ("on", true), ("1", true),
                                 ("false", false), ("No", false), ("off", false), ("0", false)] {
            #expect(try c("dtx = \(text)").dtx == expected, "\(text)")
        }
        for (text, expected) in [("0", 0.0), ("-0", 0.0), ("+12", 12.0), ("-40", -40.0), ("40", 40.0),
                                 ("1.25", 1.25), ("-0.5", -0.5), (".5", 0.5), ("3.", 3.0), ("-39.999999", -39.999999)] {
            #expect(try c("gain-db = \(text)").gainDB == expected, "\(text)")
        }
        #expect(try c("seconds = 0").seconds == 0)
        #expect(try c("seconds = 2147483647").seconds == 2_147_483_647)
        #expect(try c("bitrate = 6000").bitrate == 6000)
        #expect(try c("bitrate = 510000").bitrate == 510_000)
        #expect(try c("high-pass-hz = 0").highPassHz == 0)
        #expect(try c("high-pass-hz = 20").highPassHz == 20)
        for r in [16_000, 24_000, 48_000] { #expect(try c("rate = \(r)").rate == r) }
        #expect(try c("capture-channel = mix").captureChannel == .mix)
        #expect(try c("capture-channel = 0").captureChannel == .index(0))
        #expect(try c("log-level = WARN").logLevel == .warn)
        #expect(try c("ptt = GPIO17").ptt == .name("GPIO17"))
        #expect(try c("ptt-mode = open").pttMode == .open)
        #expect(try c("stun = 192.0.2.1:3478").stun == HostPort(host: "192.0.2.1", port: 3478))
        #expect(try c("stun = [2001:db8::1]:19302").stun == HostPort(host: "2001:db8::1", port: 19302))
        #expect(try c("stun = [2001:db8::1]:19302").stun?.description == "[2001:db8::1]:19302")
        #expect(try c("interfaces = wlan0").interfaces == ["wlan0"])
        #expect(try c("turn-detection = vad").turnDetection == .vad)
        #expect(try c("max-session-minutes = 1440").maxSessionMinutes == 1440)
        #expect(try c("frame-ms = 20").frameMS == 20)
    }

    @Test("value kinds: refused forms, with what was expected", arguments: [
        ("openai = maybe", "openai: 'maybe' is not a boolean (true/false, yes/no, on/off, 1/0)"),
        ("seconds = 1.5", "seconds: '1.5' is not a whole number of seconds from 0 to 2147483647"),
        ("seconds = 99999999999", "seconds: '99999999999' is not a whole number of seconds from 0 to 2147483647"),
        ("seconds = +5", "seconds: '+5' is not a whole number of seconds from 0 to 2147483647"),
        ("gain-db = 40.5", "gain-db: '40.5' is not a number of dB from -40 to 40"),
        ("gain-db = 1e3", "gain-db: '1e3' is not a number of dB from -40 to 40"),
        ("gain-db = -", "gain-db: '-' is not a number of dB from -40 to 40"),
        ("gain-db = 1.2.3", "gain-db: '1.2.3' is not a number of dB from -40 to 40"),
        ("gain-db = 0.0000001", "gain-db: '0.0000001' is not a number of dB from -40 to 40"),
        ("agc-target-dbfs = 0", "agc-target-dbfs: '0' is not a level in dBFS from -40 to -1"),
        ("noise-gate-dbfs = -91", "noise-gate-dbfs: '-91' is not a level in dBFS from -90 to -20"),
        ("rate = 44100", "rate: '44100' is not one of 16000, 24000, 48000"),
        ("frame-ms = 40", "frame-ms: '40' is not 10 or 20"),
        ("bitrate = 5999", "bitrate: '5999' is not a bitrate from 6000 to 510000 bit/s"),
        ("complexity = 11", "complexity: '11' is not a whole number from 0 to 10"),
        ("high-pass-hz = 10", "high-pass-hz: '10' is not 0 (off) or a frequency from 20 to 1000 Hz"),
        ("capture-channel = left", "capture-channel: 'left' is not 'mix' or a channel number from 0 to 31"),
        ("capture-channel = 32", "capture-channel: '32' is not 'mix' or a channel number from 0 to 31"),
        ("log-level = verbose", "log-level: 'verbose' is not one of error, warn, info, debug"),
        ("ptt-mode = push", "ptt-mode: 'push' is not one of hold, toggle, open"),
        ("turn-detection = server", "turn-detection: 'server' is not one of ptt, vad, server_vad, semantic_vad"),
        ("ptt = gpiochip0:x", "ptt: 'gpiochip0:x' is not a GPIO line name (GPIO17) or CHIP:OFFSET (gpiochip0:17)"),
        ("ptt = :17", "ptt: ':17' is not a GPIO line name (GPIO17) or CHIP:OFFSET (gpiochip0:17)"),
        ("ptt = GPIO 17", "ptt: 'GPIO 17' is not a GPIO line name (GPIO17) or CHIP:OFFSET (gpiochip0:17)"),
        ("stun = stun.example.net", "stun: 'stun.example.net' is not HOST:PORT (IPv6 in brackets)"),
        ("stun = host:0", "stun: 'host:0' is not HOST:PORT (IPv6 in brackets)"),
        ("stun = host:65536", "stun: 'host:65536' is not HOST:PORT (IPv6 in brackets)"),
        ("stun = 2001:db8::1:3478", "stun: '2001:db8::1:3478' is not HOST:PORT (IPv6 in brackets)"),
        ("interfaces = eth0,,wlan0", "interfaces: 'eth0,,wlan0' is not a comma list of interface names (eth0,wlan0)"),
        ("interfaces = averyveryverylongname", "interfaces: 'averyveryverylongname' is not a comma list of interface names (eth0,wlan0)"),
        ("voice = two words", "voice: 'two words' is not a single word (no spaces)"),
        ("max-session-minutes = 0", "max-session-minutes: '0' is not a whole number of minutes from 1 to 1440"),
        ("stats-seconds = 86401", "stats-seconds: '86401' is not a whole number of seconds from 0 to 86400"),
        ("pin-sha256 = abc", "pin-sha256: 'abc' is not a comma list of pin-sha256 values (base64 of 32 bytes)"),
    ])
    func refused(line: String, expected: String) {
        #expect(message { () throws(ConfigError) in try load(route + line) } == "linnet.conf:2: " + expected)
    }

    @Test("URLs are checked by the HTTP codec's parser")
    func urls() {
        #expect(message { () throws(ConfigError) in try load("whip = ftp://x/y") }
                == "linnet.conf:1: whip: 'ftp://x/y' is not an http:// or https:// URL")
        #expect(message { () throws(ConfigError) in try load("backend = https://user@host/\nchat = 1") }
                == "linnet.conf:1: backend: 'https://user@host/' is not an http:// or https:// URL")
    }
}

@Suite struct ConfigLayerTests {
    @Test("file < environment < flags, and each value remembers its source")
    func precedence() throws {
        let file = route + "seconds = 10\nlog-level = warn\nbitrate = 20000\n"
        let env: [TextKey: String] = ["LINNET_SECONDS": "20", "LINNET_LOG_LEVEL": "error", "PATH": "/usr/bin", "HOME": "/root"]
        let c = try load(file, env: env, args: ["--seconds", "30"])
        #expect(c.seconds == 30 && c.sources["seconds"] == .flag("--seconds"))
        #expect(c.logLevel == .error && c.sources["log-level"] == .environment("LINNET_LOG_LEVEL"))
        #expect(c.bitrate == 20_000 && c.sources["bitrate"] == .file(path: "linnet.conf", line: 4))
        #expect(try load(file, env: env).seconds == 20)
        #expect(try load(file).seconds == 10)
    }

    @Test("an empty value in a higher layer restores the default")
    func emptyResets() throws {
        let file = route + "ptt = GPIO17\ncomplexity = 9\n"
        let c = try load(file, env: ["LINNET_PTT": ""], args: ["--complexity="])
        #expect(c.ptt == nil && c.sources["ptt"] == nil)
        #expect(c.complexity == 10 && c.sources["complexity"] == nil)
    }

    @Test("environment names: dashes become underscores, upper case")
    func environmentNames() throws {
        #expect(Config.environmentName("agc-target-dbfs") == "LINNET_AGC_TARGET_DBFS")
        #expect(Config.keyFromEnvironment("LINNET_AGC_TARGET_DBFS") == "agc-target-dbfs")
        let c = try load(nil, env: ["LINNET_AGC": "1", "LINNET_AGC_TARGET_DBFS": "-12", "LINNET_WHIP": "http://h/w",
                                    "LINNET_CONFIG": "/elsewhere.conf", "NOT_LINNET_SECONDS": "x"])
        #expect(c.agc && c.agcTargetDBFS == -12 && c.whip?.host == "h")
    }

    @Test("environment errors name the variable")
    func environmentErrors() {
        #expect(message { () throws(ConfigError) in try load(route, env: ["LINNET_SECONDS": "soon"]) }
                == "environment LINNET_SECONDS: seconds: 'soon' is not a whole number of seconds from 0 to 2147483647")
        #expect(message { () throws(ConfigError) in try load(route, env: ["LINNET_GIAN_DB": "3"]) }
                == "environment LINNET_GIAN_DB: unknown variable (did you mean 'LINNET_GAIN_DB'?)")
        #expect(message { () throws(ConfigError) in try load(route, env: ["LINNET_HOME": "/x"]) }
                == "environment LINNET_HOME: unknown variable")
        // Several bad variables: the first by name is reported, whatever the order.
        #expect(message { () throws(ConfigError) in try load(route, env: ["LINNET_Z": "1", "LINNET_A": "1"]) }
                == "environment LINNET_A: unknown variable")
    }

    @Test("flag forms: --key value, --key=value, bare booleans, --no-…")
    func flagForms() throws {
        let c = try load(nil, args: ["--whip=https://w.example/whip", "--seconds", "5", "--agc", "--no-fec",
                                     "--dtx=yes", "--limiter=false", "--gain-db", "-6", "--events", "-",
                                     "--instructions", "Be brief.", "--config", "/etc/x.conf", "--seconds=6"])
        #expect(c.whip?.host == "w.example" && c.seconds == 6)
        #expect(c.agc && !c.fec && c.dtx && !c.limiter)
        #expect(c.gainDB == -6 && c.events == "-" && c.instructions == "Be brief.")
        #expect(c.sources["fec"] == .flag("--no-fec") && c.sources["seconds"] == .flag("--seconds"))
    }

    @Test("flag errors", arguments: [
        (["--seconds"], "--seconds needs a value"),
        (["--ptt", "--seconds", "5"], "--ptt needs a value"),
        (["--fec", "false"], "unexpected argument 'false' (options are --key value, --key=value, or --flag for booleans)"),
        (["extra"], "unexpected argument 'extra' (options are --key value, --key=value, or --flag for booleans)"),
        (["-v"], "unexpected argument '-v' (options are --key value, --key=value, or --flag for booleans)"),
        (["--gian-db", "3"], "unknown option '--gian-db' (did you mean '--gain-db'?)"),
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["--seconds", "-5"], "--seconds: '-5' is not a whole number of seconds from 0 to 2147483647"),
        (["--rate=44100"], "--rate: '44100' is not one of 16000, 24000, 48000"),
        (["--no-seconds"], "unknown option '--no-seconds'"),
    ])
    func flagErrors(args: [String], expected: String) {
        #expect(message { () throws(ConfigError) in try load(route, args: args) } == expected)
    }

    @Test("which config file: --config, then LINNET_CONFIG, then the default if it exists")
    func configPath() throws {
        func path(_ args: [String], _ env: [TextKey: String]) throws -> String {
            let p = try Config.configPath(arguments: args, environment: env)
            return p.path + (p.explicit ? " (named)" : " (default)")
        }
        #expect(try path(["--seconds", "1", "--config", "/a.conf"], ["LINNET_CONFIG": "/b.conf"]) == "/a.conf (named)")
        #expect(try path(["--config=/c.conf"], [:]) == "/c.conf (named)")
        #expect(try path([], ["LINNET_CONFIG": "/b.conf"]) == "/b.conf (named)")
        #expect(try path([], ["LINNET_CONFIG": ""]) == "/etc/linnet/linnet.conf (default)")
        #expect(try path([], [:]) == "/etc/linnet/linnet.conf (default)")
        #expect(throws: ConfigError.missingValue(flag: "--config")) { _ = try Config.configPath(arguments: ["--config"], environment: [:]) }
        #expect(throws: ConfigError.missingValue(flag: "--config")) { _ = try Config.configPath(arguments: ["--config="], environment: [:]) }
    }
}

@Suite struct ConfigRuleTests {
    @Test("cross-field rules", arguments: [
        ("whip = http://a/w\nbackend = http://b/\nchat = 1",
         "choose one route: whip (linnet.conf:1) and backend (linnet.conf:2) are both set (unset one with an empty value, e.g. --whip=)"),
        ("whip = http://a/w\nbackend = http://b/\nchat = 1\nopenai = true\ntoken-url = http://t/",
         "choose one route: whip (linnet.conf:1), backend (linnet.conf:2) and openai (linnet.conf:4) are all set (unset one with an empty value, e.g. --whip=)"),
        ("", "no route: set whip, backend (with chat) or openai (with token-url)"),
        ("backend = http://b/", "linnet.conf:1: backend needs chat (the chat id of the backend's voice route)"),
        ("whip = http://a/w\nchat = 7", "linnet.conf:2: chat applies only with backend"),
        ("openai = on", "linnet.conf:1: openai needs token-url (where the backend hands out ephemeral keys)"),
        ("whip = http://a/w\ntoken-url = http://t/", "linnet.conf:2: token-url applies only with openai"),
        ("whip = http://a/w\nturn-detection = ptt\nptt = GPIO5\nptt-mode = open", "linnet.conf:2: turn-detection ptt contradicts ptt-mode open (no button): use ptt-mode hold or toggle"),
    ])
    func rules(text: String, expected: String) {
        #expect(message { () throws(ConfigError) in try load(text) } == expected)
    }

    @Test("a route across layers conflicts too, naming each layer")
    func routeAcrossLayers() {
        #expect(message { () throws(ConfigError) in try load("backend = http://b/\nchat = 1", args: ["--whip", "http://a/w"]) }
                == "choose one route: whip (--whip) and backend (linnet.conf:1) are both set (unset one with an empty value, e.g. --backend=)")
        // Unsetting the file's route on the command line resolves it.
        #expect((try? load("backend = http://b/\nchat = 1", args: ["--whip", "http://a/w", "--backend=", "--chat="]))?.whip?.host == "a")
    }

    @Test("no route is fine when not required; turn detection follows the button")
    func optionalRoute() throws {
        let c = try load("ptt = GPIO17", requireRoute: false)
        #expect(c.effectiveTurnDetection == .ptt)
        #expect(try load("ptt = GPIO17\nptt-mode = open", requireRoute: false).effectiveTurnDetection == .vad)
        #expect(try load("ptt = GPIO17\nturn-detection = vad", requireRoute: false).effectiveTurnDetection == .vad)
        // Harmless leftovers are allowed (a higher layer may switch the feature off).
        #expect(try load("ptt-mode = toggle\nagc-target-dbfs = -10", requireRoute: false).agc == false)
    }
}

@Suite struct ConfigSuggestionTests {
    @Test("edit distance (optimal string alignment)")
    func distance() {
        func d(_ a: String, _ b: String) -> Int { Config.editDistance(Array(a.utf8), Array(b.utf8)) }
        #expect(d("kitten", "sitting") == 3)
        #expect(d("", "abc") == 3 && d("abc", "") == 3 && d("abc", "abc") == 0)
        #expect(d("gian-db", "gain-db") == 1)  // one swap of neighbours
        #expect(d("ca", "abc") == 3)  // OSA, not unrestricted Damerau (which gives 2)
    }

    @Test("suggestions", arguments: [("gian-db", "gain-db"), ("gain_db", "gain-db"), ("GAIN-DB", "gain-db"),
                                     ("secnds", "seconds"), ("ptt-mod", "ptt-mode"), ("bitrat", "bitrate"),
                                     ("stnu", "stun"), ("fe", "fec"), ("volume", nil), ("x", nil), ("home", nil)])
    func suggestions(typed: String, expected: String?) {
        #expect(Config.suggestion(for: typed) == expected)
    }
}

/// `aec = auto` is on exactly where the speaker can be heard by the microphone, and
/// `duplex = auto` holds the microphone only where echo can reach it uncancelled: with
/// files (no air between speaker and microphone) the call is full duplex at once.
@Test func duplexFollowsTheAcousticPath() throws {
    var c = Config()
    #expect(c.aecChoice == .auto && c.duplex == .auto)
    // A speaker and a microphone: the canceller runs, and measures the echo.
    #expect(c.acousticPath && c.aec && c.micHold == .whileEchoAudible)
    // Files or none on either side: nothing to cancel, nothing to hold.
    for change in [{ (c: inout Config) in c.output = "out.wav" }, { c in c.input = "in.wav" },
                   { c in c.playback = "none" }, { c in c.capture = "none" }] {
        var d = Config()
        change(&d)
        #expect(!d.acousticPath && !d.aec && d.micHold == .never)
    }
    // A speaker into the room with the canceller turned off: nothing measures the echo,
    // so the microphone is held while the assistant speaks.
    c.aec = false
    #expect(c.aecChoice == .off && c.micHold == .whileAssistantSpeaks)
    // Explicit choices win.
    c.duplex = .full
    #expect(c.micHold == .never)
    c.duplex = .half
    c.aec = true
    #expect(c.micHold == .whileAssistantSpeaks)
    // linnet audio: a far end to cancel turns auto on (the offline reference, the live
    // far end), never its loopback (the speaker plays the microphone itself).
    var a = Config(for: .audio)
    #expect(!a.aec)
    a.farEnd = "speaker.wav"
    #expect(a.aec)
    a.farEnd = nil
    a.input = "mic.wav"; a.output = "out.wav"; a.reference = "speaker.wav"
    #expect(a.aec)
}

/// `aec` and `voice-flag` take `auto` as well as the boolean words, and stay flags.
@Test func autoSwitches() throws {
    var c = try Config.load(file: nil, environment: [:], arguments: ["--no-aec", "--voice-flag"], requireRoute: false)
    #expect(c.aecChoice == .off && c.voiceFlagChoice == .on)
    c = try Config.load(file: nil, environment: [:], arguments: ["--aec=auto", "--voice-flag=off"], requireRoute: false)
    #expect(c.aecChoice == .auto && c.voiceFlagChoice == .off && !c.voiceFlag)
    #expect(throws: ConfigError.self) { try Config.load(file: nil, environment: [:], arguments: ["--aec=maybe"], requireRoute: false) }
}
