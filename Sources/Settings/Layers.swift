// Reading the layers into a Config: the config file, `LINNET_*` variables and flags.
//
// - One key space: a key is its table row's name (`gain-db`), `LINNET_GAIN_DB` in the
//   environment and `--gain-db` on the command line. Layers: file < environment < flags;
//   a later layer replaces a value, and an empty value (`ptt =`, `LINNET_PTT=`,
//   `--ptt=`) resets the key to its default.
// - Strict: unknown keys and bad values are errors naming where they came from
//   (`linnet.conf:12`, `environment LINNET_X`, `--flag`), with a "did you mean" for
//   typos. A key twice in the file is an error (a hand-edited file's mistake); a flag
//   twice takes the last (wrapper scripts append overrides).
// - File syntax: `key = value` lines; whole-line comments starting with `#` or `;`;
//   blank lines; a value may be in double quotes with `\"`, `\\`, `\n` and `\t`
//   escapes (quotes keep leading/trailing spaces and `#`). There are no inline
//   comments: `seconds = 5 # five` is a bad value, which the error message shows.
// - Booleans: `true|false|yes|no|on|off|1|0`; on the command line a bare `--fec` is
//   true, `--no-fec` false, `--fec=false` works; `--fec false` does not (a boolean
//   flag never eats the next argument).
import Wire

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

/// A configuration a command cannot run with; the message names the source.
public enum ConfigError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A key no option has; `suggestion` is the nearest known key, if any is close.
    case unknownKey(String, source: ConfigSource, suggestion: String?)
    /// A flag of another command (`linnet demo --whip`).
    case notAnOption(flag: String, command: Command)
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
        case .notAnOption(let flag, let command):
            return "'\(flag)' is not an option of linnet \(command) ('linnet help \(command)' lists them)"
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

    /// Whether the command line is at fault (a usage error, 64) rather than the file or
    /// environment (a configuration error, 78).
    public var isUsage: Bool {
        switch self {
        case .unexpectedArgument, .missingValue, .notAnOption: return true
        case .unknownKey(_, let source, _), .badValue(_, _, _, let source):
            if case .flag = source { return true }
            return false
        default: return false
        }
    }
}

extension Config {
    /// Which config file to read: `--config FILE` (or `--config=FILE`), else
    /// `LINNET_CONFIG`, else `defaultPath`. `explicit` is false for the default: the
    /// caller reads it only when it exists, while a named file must exist.
    public static func configPath(arguments: [String], environment: [TextKey: String]) throws(ConfigError) -> (path: String, explicit: Bool) {
        let flag = "--" + SettingsTable.configKey
        var found: String? = nil
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            if a.bytesEqual(flag) {
                guard i + 1 < arguments.count, !arguments[i + 1].isEmpty else { throw .missingValue(flag: flag) }
                found = arguments[i + 1]
                i += 2
                continue
            }
            if a.startsWithBytes(flag + "=") {
                let v = String(Substring(a.utf8.dropFirst(flag.utf8.count + 1)))
                guard !v.isEmpty else { throw .missingValue(flag: flag) }
                found = v
            }
            i += 1
        }
        if let found { return (found, true) }
        if let env = environment[TextKey(environmentName(SettingsTable.configKey))], !env.isEmpty { return (env, true) }
        return (defaultPath, false)
    }

    /// Reads the layers in order (file < environment < flags) and checks the rules
    /// across keys.
    /// - Parameters:
    ///   - command: whose flags and defaults apply; the file and environment are read
    ///     only for the commands that read them (`Command.readsLayers`).
    ///   - file: the config file's path (for messages) and text; nil when there is none.
    ///   - environment: the process environment; only `LINNET_…` names are read.
    ///   - arguments: the words after `linnet <command>`.
    ///   - requireRoute: whether one of whip / backend / openai must be set (`run`
    ///     needs one; `check` may not).
    public static func load(for command: Command = .run, file: (path: String, text: String)?, environment: [TextKey: String],
                            arguments: [String], requireRoute: Bool = true) throws(ConfigError) -> Config {
        var config = Config(for: command)
        if command.readsLayers {
            if let file { try config.apply(fileText: file.text, path: file.path) }
            try config.apply(environment: environment)
        }
        try config.apply(arguments: arguments)
        try config.validate(requireRoute: requireRoute)
        return config
    }

    /// Applies a config file's `key = value` lines.
    public mutating func apply(fileText text: String, path: String) throws(ConfigError) {
        var firstLine: [TextKey: Int] = [:]
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
                throw .syntax("expected 'key = value', found '\(Self.shown(line))'", source: source)
            }
            let key = string(trimmed(line[line.startIndex..<eq]))
            guard !key.isEmpty else { throw .syntax("missing key before '='", source: source) }
            let value = try Self.parseFileValue(trimmed(line[(eq + 1)...]), source: source)
            if key.bytesEqual(SettingsTable.configKey) {
                throw .syntax("'config' cannot be set inside the config file (use --config or LINNET_CONFIG)", source: source)
            }
            guard SettingsTable.layerKeys.containsBytes(equalTo: key) else { throw .unknownKey(key, source: source, suggestion: Self.suggestion(for: key)) }
            if let first = firstLine[TextKey(key)] { throw .duplicateKey(key, source: source, firstLine: first) }
            firstLine[TextKey(key)] = lineNumber
            try set(key, value, source: source)
        }
    }

    /// Keys whose values are secrets: never printed, not even back in an error about a
    /// line that does not parse (the value may be right there, `ice-credential s3cret`).
    static let secretKeys = ["ice-credential"]

    /// A malformed line as an error shows it: whole, unless its first word is (or is a
    /// misspelling of) a secret key, when only that word is shown.
    static func shown(_ line: ArraySlice<UInt8>) -> String {
        let first = line.prefix { $0 != 32 && $0 != 9 && $0 != 58 }  // space, tab, ':'
        let word = string(first)
        let secret = secretKeys.containsBytes(equalTo: word)
            || Self.suggestion(for: word).map { secretKeys.containsBytes(equalTo: $0) } == true
        return secret && first.count < line.count ? word + " … (the rest is not shown: it may be the secret)" : string(line)
    }

    /// Applies `LINNET_KEY` variables (dashes become underscores, upper case), in name
    /// order so the first error reported does not depend on the environment's order.
    /// Names are ordered and matched by their bytes (POSIX environment names are byte
    /// strings; for the ASCII names this is the order `sorted()` gave).
    public mutating func apply(environment: [TextKey: String]) throws(ConfigError) {
        let names = environment.keys.sorted { $0.text.bytesPrecede($1.text) }
        for entry in names where entry.text.startsWithBytes("LINNET_") {
            let name = entry.text
            let key = Self.keyFromEnvironment(name)
            if key.bytesEqual(SettingsTable.configKey) { continue }  // read by configPath
            let value = environment[entry] ?? ""
            let source = ConfigSource.environment(name)
            guard SettingsTable.layerKeys.containsBytes(equalTo: key) else {
                let suggestion = Self.suggestion(for: key).map { Self.environmentName($0) }
                throw .unknownKey(name, source: source, suggestion: suggestion)
            }
            try set(key, value, source: source)
        }
    }

    /// Applies `--key value`, `--key=value`, `--flag` and `--no-flag` words: the flags of
    /// this config's command, and their old spellings (`Key.aliases`).
    public mutating func apply(arguments: [String]) throws(ConfigError) {
        let mine = SettingsTable.keys(for: command)
        func row(_ name: String) -> Key? {
            for k in mine where k.name.bytesEqual(name) { return k }
            return nil
        }
        var i = 0
        while i < arguments.count {
            let word = arguments[i]
            i += 1
            guard word.startsWithBytes("--"), word.utf8.count > 2 else { throw .unexpectedArgument(word) }
            var name = String(Substring(word.utf8.dropFirst(2)))
            var inlineValue: String? = nil
            if let eq = name.firstIndex(ofByte: UInt8(ascii: "=")) {
                inlineValue = String(name.bytes(from: name.utf8.index(after: eq), to: name.endIndex))
                name = String(name.bytes(from: name.startIndex, to: eq))
            }
            let flag = "--" + name
            // An old spelling: the key it stands for, and the value where it has one.
            var key = row(name)
            if key == nil {
                for k in mine {
                    for a in k.aliases where a.flag.bytesEqual(name) {
                        key = k
                        if let v = a.value {
                            guard inlineValue == nil else { throw .unexpectedArgument(word) }
                            inlineValue = v
                        }
                    }
                }
            }
            if let key, key.name.bytesEqual(SettingsTable.configKey) {
                // Read by configPath; skip its value here.
                if inlineValue == nil { i += 1 }
                continue
            }
            if let key, key.isBoolean {
                try set(key.name, inlineValue ?? "true", source: .flag(flag))
                continue
            }
            if key == nil, name.startsWithBytes("no-"), inlineValue == nil, let negated = row(String(Substring(name.utf8.dropFirst(3)))), negated.isBoolean {
                try set(negated.name, "false", source: .flag(flag))
                continue
            }
            guard let key else {
                if SettingsTable.key(name) != nil { throw .notAnOption(flag: flag, command: command) }
                let suggestion = Self.suggestion(for: name, among: mine.map { $0.name }).map { "--" + $0 }
                throw .unknownKey(flag, source: .flag(flag), suggestion: suggestion)
            }
            if let inlineValue {
                try set(key.name, inlineValue, source: .flag(flag))
            } else {
                // `--ptt --seconds 5`: the next word is a flag, not ptt's value.
                guard i < arguments.count, !arguments[i].startsWithBytes("--") else { throw .missingValue(flag: flag) }
                try set(key.name, arguments[i], source: .flag(flag))
                i += 1
            }
        }
    }

    /// Sets one key from its text form; an empty value restores the default.
    public mutating func set(_ name: String, _ value: String, source: ConfigSource) throws(ConfigError) {
        guard let key = SettingsTable.key(name) else { throw .unknownKey(name, source: source, suggestion: Self.suggestion(for: name)) }
        if value.isEmpty {
            reset(key)
            sources[TextKey(name)] = nil
            return
        }
        guard key.assign(&self, value) else {
            throw .badValue(key: name, value: value, expected: key.expected, source: source)
        }
        sources[TextKey(name)] = source
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

    /// The known key nearest to a typo: within two edits (insert, delete, substitute,
    /// swap of neighbours) and fewer edits than half its length; `_` counts as `-`.
    static func suggestion(for key: String, among candidates: [String] = SettingsTable.layerKeys) -> String? {
        var typed = Array(key.utf8).map { $0 == 95 ? UInt8(45) : $0 }
        for i in typed.indices where typed[i] >= 65 && typed[i] <= 90 { typed[i] += 32 }
        var best: (key: String, distance: Int)? = nil
        for candidate in candidates {
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
