/// Settings: every option of every command, in one table (`SettingsTable.rows`), and the
/// typed `Config` the rest of the program reads, filled from it.
///
/// Design decisions:
/// - One row per key: its name (the file's `key`, `LINNET_KEY`, `--key`), its kind
///   (text, URL, path, whole or decimal range, boolean, one-of, comma list), its
///   default, one line of help, the commands that take it, and how it sets its
///   `Config` property. A key is spelled once; parsing, help, defaults, resets to the
///   default, suggestions for typos and the tests all read the row.
/// - Defaults are text, parsed like any other value, so a default is always a value the
///   key takes (a test checks each) and help shows it as a user would write it. A command
///   may start a key elsewhere (`demo` runs 5 s, `run` forever): the row says so.
/// - Layers: the config file and `LINNET_*` hold `run`'s keys (what the device runs
///   with); `run`, `check` and `audio` read them so they see what `run` would, and then
///   their own flags. `demo` and `answer` read flags only: a built-in call should not
///   change with the device's file. One precedence everywhere: flags over the
///   environment over the file; an empty value resets a key to its default.
/// - Pure: the caller passes the file's text, the environment and the arguments in;
///   nothing here opens a file or reads the process (ARCHITECTURE.md "Modules").
/// - Embedded Swift: a row reaches its property through a closure built from a typed
///   `Parser<T>` (no key paths, no existentials); `Config` keeps the property names the
///   rest of the program reads.
import Wire
import Audio
import Signaling

/// The commands that take options (CLI.md).
public enum Command: Int, Sendable, CaseIterable, CustomStringConvertible {
    case run, check, demo, audio, answer

    public var description: String {
        switch self {
        case .run: return "run"
        case .check: return "check"
        case .demo: return "demo"
        case .audio: return "audio"
        case .answer: return "answer"
        }
    }

    /// Whether the command reads the config file and `LINNET_*` before its flags.
    public var readsLayers: Bool { self == .run || self == .check || self == .audio }
}

/// A set of commands, as a row lists them.
public struct Commands: OptionSet, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public init(_ command: Command) { rawValue = 1 << UInt8(command.rawValue) }

    public static let run = Commands(.run)
    public static let check = Commands(.check)
    public static let demo = Commands(.demo)
    public static let audio = Commands(.audio)
    public static let answer = Commands(.answer)
    /// `check` takes every option of `run` ("Takes run's options"): the agent's keys.
    public static let agent: Commands = [.run, .check]

    public func has(_ command: Command) -> Bool { contains(Commands(command)) }
}

/// The heading a key is listed under in help, and the part of `Config` it fills.
public enum Section: Int, Sendable, CaseIterable {
    case config, route, credentials, audioEnds, button, network, session, running, hooks, codec, answer

    public var title: String {
        switch self {
        case .config: return "Config"
        case .route: return "Route (one of)"
        case .credentials: return "Token and TLS"
        case .audioEnds: return "Microphone and speaker"
        case .button: return "Push-to-talk button and status LEDs"
        case .network: return "Network"
        case .session: return "Provider session"
        case .running: return "Running"
        case .hooks: return "Capture hooks (in this order)"
        case .codec: return "Opus"
        case .answer: return "Answering"
        }
    }
}

/// An old spelling of a flag that still works (CLI.md: a name changes only with a
/// reason, and the old spelling keeps working).
public struct Alias: Sendable {
    /// The flag without dashes (`channel`).
    public let flag: String
    /// The value it stands for (`--no-high-pass` is `--high-pass-hz=0`); nil: it takes
    /// the key's value as the key does.
    public let value: String?

    public init(_ flag: String, value: String? = nil) {
        self.flag = flag
        self.value = value
    }
}

/// One row of the table.
public struct Key: Sendable {
    public let name: String
    public let section: Section
    public let commands: Commands
    /// One line for `linnet help`.
    public let help: String
    /// How help writes the value (`URL`, `N`); empty for booleans.
    public let metavar: String
    /// What a refused value should have been ("a whole number ≥ 0").
    public let expected: String
    public let isBoolean: Bool
    /// Free text (help quotes its default).
    public let isText: Bool
    /// The default as the key's text; nil: unset.
    public let defaultText: String?
    /// Commands that start the key elsewhere (`demo`: seconds 5).
    public let commandDefaults: [Command: String]
    public let aliases: [Alias]
    /// A value the key takes other than its default (for the table's tests).
    public let example: String
    /// Parses `text` into the key's property; false when the kind refuses it.
    let assign: @Sendable (inout Config, String) -> Bool
    /// Unsets the property (keys whose default is nil).
    let clear: @Sendable (inout Config) -> Void

    /// The default `command` starts from.
    public func defaultText(for command: Command) -> String? { commandDefaults[command] ?? defaultText }

    /// A key whose property is optional: unset by default (nil), or `default` where given.
    @inline(never)
    static func optional<T>(_ name: String, _ kind: Parser<T>, _ section: Section, _ commands: Commands,
                            default defaultText: String? = nil, also commandDefaults: [Command: String] = [:],
                            aliases: [Alias] = [], example: String? = nil, _ help: String,
                            set: @escaping @Sendable (inout Config, T?) -> Void) -> Key {
        row(name, kind, section, commands, defaultText, commandDefaults, aliases, example, help, set: { set(&$0, $1) },
            clear: { set(&$0, nil) })
    }

    /// A key whose property always has a value: `default` when nothing sets it.
    @inline(never)
    static func value<T>(_ name: String, _ kind: Parser<T>, _ section: Section, _ commands: Commands,
                         default defaultText: String, also commandDefaults: [Command: String] = [:],
                         aliases: [Alias] = [], example: String? = nil, _ help: String,
                         set: @escaping @Sendable (inout Config, T) -> Void) -> Key {
        // A boolean's example is the value it does not default to.
        let other = kind.isBoolean && defaultText.bytesEqual("true") ? "false" : nil
        return row(name, kind, section, commands, defaultText, commandDefaults, aliases, example ?? other, help, set: set, clear: { _ in })
    }

    private static func row<T>(_ name: String, _ kind: Parser<T>, _ section: Section, _ commands: Commands, _ defaultText: String?,
                               _ commandDefaults: [Command: String], _ aliases: [Alias], _ example: String?, _ help: String,
                               set: @escaping @Sendable (inout Config, T) -> Void,
                               clear: @escaping @Sendable (inout Config) -> Void) -> Key {
        Key(name: name, section: section, commands: commands, help: help, metavar: kind.metavar, expected: kind.expected,
            isBoolean: kind.isBoolean, isText: kind.isText, defaultText: defaultText, commandDefaults: commandDefaults,
            aliases: aliases, example: example ?? kind.example,
            assign: { config, text in
                guard let v = kind.parse(text) else { return false }
                set(&config, v)
                return true
            },
            clear: clear)
    }
}

public enum SettingsTable {
    /// The row named `name` (byte for byte: key names are ASCII, Wire/Text.swift).
    public static func key(_ name: String) -> Key? {
        for k in rows where k.name.bytesEqual(name) { return k }
        return nil
    }

    /// The rows `command` takes as flags, in table order.
    public static func keys(for command: Command) -> [Key] { rows.filter { $0.commands.has(command) } }

    /// The keys of the config file and `LINNET_*`: `run`'s, less `config` itself.
    /// In table order (suggestions prefer the first of equally near keys); compared byte
    /// for byte (`containsBytes(equalTo:)`, Wire/Text.swift).
    static let layerKeys: [String] = rows.filter { $0.commands.has(.run) && !$0.name.bytesEqual(configKey) }.map { $0.name }

    /// The key that names the config file (read before the layers, by `Config.configPath`).
    static let configKey = "config"
}
