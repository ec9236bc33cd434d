import FuzzSupport

// The config file (`key = value` lines, /etc/linnet/linnet.conf) as Config reads it:
// apply(fileText:path:) on a default Config, then validate() as `linnet check` does.
// Crash-freedom only: the file has no writer to round-trip through. Invariant: a
// refused file reports a line inside the file.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let text = String(decoding: inputBytes(data, size), as: UTF8.self)
    var config = Config()
    do throws(ConfigError) {
        try config.apply(fileText: text, path: "fuzz.conf")
    } catch {
        _ = error.description
        let lines = text.utf8.reduce(1) { $1 == 10 ? $0 + 1 : $0 }
        var source: ConfigSource? = nil
        switch error {
        case .unknownKey(_, let s, _), .badValue(_, _, _, let s), .syntax(_, let s), .duplicateKey(_, let s, _): source = s
        case .conflict(_, let s): source = s
        case .missingValue, .unexpectedArgument, .notAnOption: break
        }
        if case .file(_, let line) = source {
            invariant(line >= 1 && line <= lines, "error on line \(line) of a \(lines)-line file: \(error)")
        }
        return 0
    }
    do throws(ConfigError) { try config.validate(requireRoute: false) } catch {}
    do throws(ConfigError) { try config.validate(requireRoute: true) } catch {}
    return 0
}
