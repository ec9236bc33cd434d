// A small command-line option reader for the subcommands (CLI.md spellings):
// `--key value`, `--key=value`, and bare `--flag` for booleans.
import Platform
import Agent

struct Options {
    var values: [String: String] = [:]
    var flags: Set<String> = []

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Parses `args` allowing only `valued` options (which take a value) and `boolean`
    /// ones (which do not).
    init(_ args: [String], valued: [String], boolean: [String] = []) throws(Failure) {
        var i = 0
        while i < args.count {
            let arg = args[i]
            guard arg.hasPrefix("--") else { throw Failure(description: "unexpected argument '\(arg)'") }
            var name = String(arg.dropFirst(2))
            var value: String? = nil
            if let eq = name.firstIndex(of: "=") {
                value = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            if boolean.contains(name) {
                guard value == nil else { throw Failure(description: "--\(name) takes no value") }
                flags.insert(name)
            } else if valued.contains(name) {
                if value == nil {
                    i += 1
                    guard i < args.count else { throw Failure(description: "--\(name) needs a value") }
                    value = args[i]
                }
                values[name] = value
            } else {
                throw Failure(description: "unknown option --\(name)")
            }
            i += 1
        }
    }

    subscript(_ name: String) -> String? { values[name] }

    func int(_ name: String, default d: Int, range: ClosedRange<Int>) throws(Failure) -> Int {
        guard let text = values[name] else { return d }
        guard let v = Int(text), range.contains(v) else {
            throw Failure(description: "--\(name): '\(text)' is not a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return v
    }
}
