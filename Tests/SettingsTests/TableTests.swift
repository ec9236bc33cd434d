import Testing
import Wire
import Audio
import Signaling
@testable import Settings

/// The table itself: each row's default and example are values the key takes, the names
/// do not collide, every command's help lists its keys, and the three layers agree.
@Suite struct SettingsTableTests {
    @Test("names are unique, and no old spelling is another key's name")
    func names() {
        var seen: Set<String> = []
        for k in SettingsTable.rows {
            #expect(seen.insert(k.name).inserted, "\(k.name) twice")
            #expect(!k.help.isEmpty && !k.expected.isEmpty, "\(k.name)")
            #expect(!k.commands.isEmpty, "\(k.name) belongs to no command")
        }
        for k in SettingsTable.rows {
            for a in k.aliases {
                #expect(SettingsTable.key(a.flag) == nil, "--\(a.flag) is both an alias of \(k.name) and a key")
                #expect(seen.insert(a.flag).inserted, "--\(a.flag) twice")
            }
        }
    }

    @Test("every default and every example is a value its key takes, for every command")
    func defaultsParse() {
        for command in Command.allCases {
            for k in SettingsTable.keys(for: command) {
                var c = Config(for: command)
                if let d = k.defaultText(for: command) { #expect(k.assign(&c, d), "\(k.name)'s default '\(d)' (\(command))") }
                #expect(k.assign(&c, k.example), "\(k.name)'s example '\(k.example)' (\(command))")
                #expect(k.example != k.defaultText(for: command), "\(k.name)'s example is its default")
            }
        }
    }

    @Test("defaults the rows give (beyond ConfigFileTests.defaults)")
    func defaults() throws {
        let c = Config()
        #expect(c.openaiURL == (try HTTPURL("https://api.openai.com/v1/realtime/calls")))
        #expect(c.eventsChannel == "oai-events" && c.limiterDBFS == -1 && !c.loopInput && c.maxAttempts == 0)
        #expect(c.pins.isEmpty && c.leds.isEmpty && c.maxSessionSeconds == nil && c.maximumSessionSeconds == 3600)
        #expect(c.listen == nil && c.answerMode == .echo && !c.pace && c.command == .run)
        // Commands that start a key elsewhere.
        let demo = Config(for: .demo)
        #expect(demo.seconds == 5 && demo.statsSeconds == 1 && demo.output == "linnet-demo.wav" && demo.events == "-")
        #expect(Config(for: .audio).seconds == 5 && Config(for: .answer).seconds == 0 && Config(for: .check) == { var r = Config(); r.command = .check; return r }())
        // An empty value resets to the command's default, not run's.
        let d = try Config.load(for: .demo, file: nil, environment: [:], arguments: ["--seconds", "9", "--seconds="], requireRoute: false)
        #expect(d.seconds == 5 && d.sources["seconds"] == nil)
    }

    @Test("every key of a command is in its help, under its section, with its default")
    func help() {
        for command in Command.allCases {
            let text = SettingsTable.optionsHelp(for: command)
            for k in SettingsTable.keys(for: command) {
                #expect(text.contains("  --\(k.name) "), "--\(k.name) missing from 'linnet help \(command)'")
                #expect(text.contains(k.section.title + ":"), "\(k.section.title) missing from 'linnet help \(command)'")
            }
            for k in SettingsTable.rows where !k.commands.has(command) {
                #expect(!text.contains("  --\(k.name) "), "--\(k.name) is not an option of \(command) but is in its help")
            }
            for line in text.split(separator: "\n") { #expect(line.utf8.count <= 88, "\(command): '\(line)'") }
        }
        #expect(SettingsTable.optionsHelp(for: .demo).contains("(default \"linnet-demo.wav\")"))
        #expect(SettingsTable.optionsHelp(for: .audio).contains("--seconds N") && SettingsTable.optionsHelp(for: .audio).contains("(default 5)"))
        #expect(SettingsTable.optionsHelp(for: .run).contains("(default 80)") && SettingsTable.optionsHelp(for: .run).contains("(--no-high-pass: 0)"))
    }

    /// Table-driven: each of run's keys set to its example through the file, through
    /// `LINNET_…` and through `--…` gives the same Config, and not the default one.
    /// (The layers only: the rules across keys are ConfigRuleTests'.)
    @Test("file, environment and flag agree for every key", arguments: Config.keys)
    func layersAgree(name: String) throws {
        func layered(file: String? = nil, env: [TextKey: String] = [:], args: [String] = []) throws -> Config {
            var c = Config()
            if let file { try c.apply(fileText: file, path: "linnet.conf") }
            try c.apply(environment: env)
            try c.apply(arguments: args)
            return c
        }
        let k = try #require(SettingsTable.key(name))
        let value = k.example
        // Quoted in the file, so leading spaces or '#' would mean the same as elsewhere.
        var escaped = ""
        for ch in value { escaped += ch == "\"" ? "\\\"" : ch == "\\" ? "\\\\" : String(ch) }
        let line = "\(name) = \"\(escaped)\"\n"
        let file = try layered(file: line).without(sources: ())
        let env = try layered(env: [TextKey(Config.environmentName(name)): value]).without(sources: ())
        let flag = try layered(args: ["--\(name)=\(value)"]).without(sources: ())
        #expect(file == env && env == flag, "\(name) = \(value)")
        #expect(file != Config(), "\(name) = \(value) changed nothing")
        if k.isBoolean {
            #expect(try layered(args: ["--\(name)"]) == layered(args: ["--\(name)=true"]).without(sources: ()).with(name, .flag("--\(name)")))
            #expect(try layered(args: ["--no-\(name)"]) == layered(args: ["--\(name)=false"]).without(sources: ()).with(name, .flag("--no-\(name)")))
        } else {
            #expect(try layered(args: ["--\(name)", value]).without(sources: ()) == flag)
        }
        // Each remembers where it came from.
        #expect(try layered(file: line).sources[TextKey(name)] == .file(path: "linnet.conf", line: 1))
        #expect(try layered(env: [TextKey(Config.environmentName(name)): value]).sources[TextKey(name)] == .environment(Config.environmentName(name)))
        // An empty value in a higher layer puts the default back.
        #expect(try layered(file: line, env: [TextKey(Config.environmentName(name)): ""]) == Config(), "\(name)")
        #expect(try layered(file: line, args: ["--\(name)="]) == Config(), "\(name)")
    }

    @Test("keys of one command only: flags of that command, not in the file or the environment")
    func commandKeys() throws {
        let a = try Config.load(for: .answer, file: nil, environment: [:], arguments: ["--listen", "127.0.0.1:0", "--mode", "tone"], requireRoute: false)
        #expect(a.listen == SocketAddress("127.0.0.1:0") && a.answerMode == .tone)
        #expect(try Config.load(for: .audio, file: nil, environment: [:], arguments: ["--pace"], requireRoute: false).pace)
        func message(_ body: () throws(ConfigError) -> Config) -> String? {
            do throws(ConfigError) { _ = try body(); return nil } catch { return error.description }
        }
        #expect(message { () throws(ConfigError) in try Config.load(for: .demo, file: nil, environment: [:], arguments: ["--whip", "http://h/w"], requireRoute: false) }
                == "'--whip' is not an option of linnet demo ('linnet help demo' lists them)")
        #expect(message { () throws(ConfigError) in try Config.load(file: ("linnet.conf", "pace = yes"), environment: [:], arguments: [], requireRoute: false) }
                == "linnet.conf:1: unknown key 'pace'")
        #expect(message { () throws(ConfigError) in try Config.load(for: .answer, file: nil, environment: [:], arguments: ["--listen", "localhost:80"], requireRoute: false) }
                == "--listen: 'localhost:80' is not an IP address and port (127.0.0.1:8080 or [::1]:8080)")
        // demo and answer never read the layers.
        let d = try Config.load(for: .demo, file: ("linnet.conf", "seconds = 9"), environment: ["LINNET_SECONDS": "8"], arguments: [], requireRoute: false)
        #expect(d.seconds == 5)
    }

    @Test("old spellings of audio's flags still work")
    func aliases() throws {
        func audio(_ args: [String]) throws -> Config {
            try Config.load(for: .audio, file: nil, environment: [:], arguments: args, requireRoute: false)
        }
        #expect(try audio(["--channel", "1"]).captureChannel == .index(1))
        #expect(try audio(["--channel=0"]).captureChannel == .index(0))
        #expect(try audio(["--no-high-pass"]).highPassHz == 0)
        #expect(try audio(["--no-high-pass"]).sources["high-pass-hz"] == .flag("--no-high-pass"))
        #expect(try audio(["--no-limiter"]).limiter == false)
        #expect(try audio(["--limiter-dbfs", "-3"]).limiterDBFS == -3)
        #expect(throws: ConfigError.unexpectedArgument("--no-high-pass=1")) { _ = try audio(["--no-high-pass=1"]) }
        // The one range and default for what audio and run both had.
        #expect(throws: ConfigError.badValue(key: "agc-target-dbfs", value: "-50", expected: "a level in dBFS from -40 to -1", source: .flag("--agc-target-dbfs"))) {
            _ = try audio(["--agc-target-dbfs", "-50"])
        }
        #expect(try audio(["--agc-target-dbfs", "-2"]).agcTargetDBFS == -2)
        #expect(try audio([]).highPassHz == 80 && (try audio([])).fec)
    }
}

extension Config {
    /// The same config without the record of where each value came from.
    func without(sources: ()) -> Config {
        var c = self
        c.sources = [:]
        return c
    }

    /// The same config with `key` recorded as set by `source`.
    func with(_ key: String, _ source: ConfigSource) -> Config {
        var c = self
        c.sources[TextKey(key)] = source
        return c
    }
}
