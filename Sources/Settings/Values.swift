// The value kinds of the settings table: how a key's text becomes its typed value, what
// help shows for it, and what a refused value should have been. Pure and allocation-light;
// no C library (Embedded Swift has no strtod), so decimals are parsed here.
import Wire
import ICE
import Audio
import Signaling

/// How one kind of value is read. `parse` answers nil for text the kind does not take;
/// the error then says "'text' is not <expected>" (one phrase per key, so every message
/// of a key reads the same wherever the value came from).
public struct Parser<Value>: Sendable {
    /// How help writes the value (`N`, `URL`, `hold|toggle|open`); empty for booleans.
    public let metavar: String
    /// What the key takes, as the tail of "'x' is not …" ("a whole number ≥ 0").
    public let expected: String
    /// A text the kind takes (and not the default), for the table's tests.
    public let example: String
    /// Booleans take no value on the command line (`--agc`, `--no-agc`).
    public let isBoolean: Bool
    /// Free text: help quotes its default (`(default "default")`).
    public let isText: Bool
    let parse: @Sendable (String) -> Value?

    public init(metavar: String, expected: String, example: String, isBoolean: Bool = false, isText: Bool = false,
                parse: @escaping @Sendable (String) -> Value?) {
        self.metavar = metavar
        self.expected = expected
        self.example = example
        self.isBoolean = isBoolean
        self.isText = isText
        self.parse = parse
    }
}

extension Parser where Value == String {
    /// Any text (a device name, a path, instructions): every non-empty value is taken.
    static func text(_ metavar: String, example: String = "some text") -> Parser {
        Parser(metavar: metavar, expected: "text", example: example, isText: true) { $0 }
    }

    /// A file path (any text; the command opens it and says why it cannot).
    static func path(_ metavar: String = "FILE") -> Parser { text(metavar, example: "/tmp/linnet-example") }

    /// One word: no spaces or control characters (ids, voice and model names).
    static func word(_ metavar: String) -> Parser {
        Parser(metavar: metavar, expected: "a single word (no spaces)", example: "word-1") { v in
            v.utf8.allSatisfy { $0 > 32 && $0 != 127 } ? v : nil
        }
    }

    /// At most `limit` bytes of any text.
    static func label(_ metavar: String, limit: Int) -> Parser {
        Parser(metavar: metavar, expected: "a label of at most \(limit) bytes", example: "label", isText: true) { v in
            v.utf8.count <= limit ? v : nil
        }
    }
}

extension Parser where Value == Bool {
    /// `true|false|yes|no|on|off|1|0`, any case; on the command line a bare `--key` is
    /// true and `--no-key` false.
    static var boolean: Parser {
        Parser(metavar: "", expected: "a boolean (true/false, yes/no, on/off, 1/0)", example: "true", isBoolean: true) { v in
            switch lowercasedASCII(v) {
            case "true", "yes", "on", "1": return true
            case "false", "no", "off", "0": return false
            default: return nil
            }
        }
    }
}

extension Parser where Value == AutoSwitch {
    /// `auto` or a boolean word; on the command line a bare `--key` is on and
    /// `--no-key` off, as for booleans.
    static var autoBoolean: Parser {
        Parser(metavar: "", expected: "auto or a boolean (true/false, yes/no, on/off, 1/0)", example: "true", isBoolean: true) { v in
            switch lowercasedASCII(v) {
            case "auto": return .auto
            case "true", "yes", "on", "1": return .on
            case "false", "no", "off", "0": return .off
            default: return nil
            }
        }
    }
}

extension Parser where Value == Int {
    /// Digits only (no sign, no spaces) within `range`, and passing `valid` where a range
    /// has holes (`0 (off) or 20…1000`).
    static func whole(_ range: ClosedRange<Int>, _ expected: String, metavar: String = "N",
                      valid: @escaping @Sendable (Int) -> Bool = { _ in true }) -> Parser {
        Parser(metavar: metavar, expected: expected, example: String(range.upperBound)) { v in
            guard let n = wholeNumber(v), range.contains(n), valid(n) else { return nil }
            return n
        }
    }

    /// One of a few numbers (`16000|24000|48000`).
    static func oneOf(_ values: [Int]) -> Parser {
        var list = "", bar = ""
        for (i, v) in values.enumerated() {
            list += (i == 0 ? "" : ", ") + String(v)
            bar += (i == 0 ? "" : "|") + String(v)
        }
        return Parser(metavar: bar, expected: "one of \(list)", example: String(values[0])) { v in
            guard let n = wholeNumber(v), values.contains(n) else { return nil }
            return n
        }
    }
}

extension Parser where Value == Double {
    /// `[-+]digits[.digits]` within `range` (at most 6 fractional digits, no exponent).
    static func decimal(_ range: ClosedRange<Int>, _ expected: String, metavar: String) -> Parser {
        let example = String(range.upperBound - range.lowerBound > 1 ? range.lowerBound + 1 : range.lowerBound) + ".5"
        return Parser(metavar: metavar, expected: expected, example: example) { v in
            guard let d = decimalNumber(v), d >= Double(range.lowerBound) && d <= Double(range.upperBound) else { return nil }
            return d
        }
    }
}

extension Parser where Value: RawRepresentable & CaseIterable & Sendable, Value.RawValue == String {
    /// One of an enum's raw values, any case (`hold|toggle|open`), matched byte for byte
    /// after ASCII folding (`init(rawValue:)` would compare as Unicode text, Wire/Text.swift).
    static var oneOf: Parser {
        var list = "", bar = ""
        for (i, c) in Value.allCases.enumerated() {
            list += (i == 0 ? "" : ", ") + c.rawValue
            bar += (i == 0 ? "" : "|") + c.rawValue
        }
        let last = Value.allCases.reversed().first?.rawValue ?? ""
        return Parser(metavar: bar, expected: "one of \(list)", example: last) { v in
            let word = lowercasedASCII(v)
            return Value.allCases.first { $0.rawValue.bytesEqual(word) }
        }
    }
}

extension Parser where Value == LogLevel {
    /// `error|warn|info|debug` (and `warning`, as Log has always taken it).
    static var logLevel: Parser {
        Parser(metavar: "error|warn|info|debug", expected: "one of error, warn, info, debug", example: "debug") {
            LogLevel(name: lowercasedASCII($0))
        }
    }
}

extension Parser where Value == HTTPURL {
    /// An http:// or https:// URL, checked by the HTTP codec's own parser.
    static var url: Parser {
        Parser(metavar: "URL", expected: "an http:// or https:// URL", example: "https://example.net:8443/a/b") { v in
            do throws(HTTPError) { return try HTTPURL(v) } catch { return nil }
        }
    }
}

extension Parser where Value == GPIOLine {
    /// A GPIO line name (`GPIO17`) or `CHIP:OFFSET` (`gpiochip0:17`).
    static var gpioLine: Parser {
        Parser(metavar: "LINE", expected: "a GPIO line name (GPIO17) or CHIP:OFFSET (gpiochip0:17)", example: "gpiochip1:7", parse: parseGPIOLine)
    }
}

extension Parser where Value == HostPort {
    /// `host:port`, `[v6]:port`, optionally with the `stun:` scheme (RFC 7064).
    static var hostPort: Parser {
        Parser(metavar: "HOST:PORT", expected: "HOST:PORT (IPv6 in brackets)", example: "stun:stun.example.net:3478", parse: parseHostPort)
    }
}

extension Parser where Value == SocketAddress {
    /// An IP address and port to listen on (`127.0.0.1:8080`, `[::1]:0`).
    static var socketAddress: Parser {
        Parser(metavar: "HOST:PORT", expected: "an IP address and port (127.0.0.1:8080 or [::1]:8080)", example: "[::1]:8080") {
            SocketAddress($0)
        }
    }
}

extension Parser where Value == CaptureChannel {
    /// `mix` or a channel number (0 is the left of a stereo HAT).
    static var captureChannel: Parser {
        Parser(metavar: "mix|K", expected: "'mix' or a channel number from 0 to 31", example: "1") { v in
            if v.bytesEqual("mix") { return .mix }
            guard let n = wholeNumber(v), n <= 31 else { return nil }
            return .index(n)
        }
    }
}

extension Parser {
    /// A comma list of `element` values (spaces around commas are ignored; an empty
    /// element is refused: `eth0,,wlan0` is a typo, not two names).
    static func list<Element>(of element: Parser<Element>, metavar: String, expected: String, example: String) -> Parser<[Element]> {
        Parser<[Element]>(metavar: metavar, expected: expected, example: example) { v in
            var out: [Element] = []
            for part in v.split(byte: UInt8(ascii: ","), omittingEmptySubsequences: false) {
                let text = string(trimmed(ArraySlice(part.utf8)))
                guard !text.isEmpty, let e = element.parse(text) else { return nil }
                out.append(e)
            }
            return out
        }
    }
}

extension Parser where Value == [String] {
    /// `eth0,wlan0`: names of 1–15 bytes (IFNAMSIZ less the NUL), no spaces or `/`.
    static var interfaces: Parser {
        let name = Parser<String>(metavar: "NAME", expected: "", example: "eth0") { v in
            v.utf8.count <= 15 && v.utf8.allSatisfy({ $0 > 32 && $0 != 127 && $0 != 47 }) ? v : nil
        }
        return .list(of: name, metavar: "NAMES", expected: "a comma list of interface names (eth0,wlan0)", example: "eth0, wlan0")
    }
}

extension Parser where Value == [IPAddress] {
    /// `203.0.113.7, 2001:db8::7`: addresses that stand for a host from outside
    /// (`answer --advertise`); the unspecified address means nothing there and is refused.
    static var ipAddresses: Parser {
        let ip = Parser<IPAddress>(metavar: "IP", expected: "", example: "203.0.113.7") { v in
            guard let a = IPAddress(v), !a.isUnspecified else { return nil }
            return a
        }
        return .list(of: ip, metavar: "IPS", expected: "a comma list of IP addresses (203.0.113.7 or 2001:db8::7)", example: "203.0.113.7")
    }
}

extension Parser where Value == [SPKIPin] {
    /// RFC 7469 pin-sha256 values (base64 of 32 bytes), comma separated.
    static var pins: Parser {
        let pin = Parser<SPKIPin>(metavar: "PIN", expected: "", example: "") { v in
            do throws(TLSError) { return try SPKIPin(base64: v) } catch { return nil }
        }
        return .list(of: pin, metavar: "PINS", expected: "a comma list of pin-sha256 values (base64 of 32 bytes)",
                     example: "2N3aE8oX2pfL6ab9+BDIAqupIyKdJUkpIhFn52swpUw=, br531uv0N6g9pZfniIwxGEcsM06n5CEI99+ToofJEGM=")
    }
}

extension Parser where Value == [GPIOLine] {
    /// Plain status LEDs on GPIO lines, in order.
    static var gpioLines: Parser {
        .list(of: .gpioLine, metavar: "LINES", expected: "a comma list of GPIO lines (GPIO5,GPIO6 or gpiochip0:5)", example: "GPIO5,gpiochip0:6")
    }
}

// MARK: Text helpers

func trimmed(_ s: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
    var s = s
    while let f = s.first, f == 32 || f == 9 { s = s.dropFirst() }
    while let l = s.last, l == 32 || l == 9 || l == 13 { s = s.dropLast() }
    return s
}

func string(_ s: ArraySlice<UInt8>) -> String { String(decoding: s, as: UTF8.self) }

/// Digits only, at most 10 of them (so the value fits whatever range a key has).
func wholeNumber(_ value: String) -> Int? {
    var n = 0
    guard !value.isEmpty, value.utf8.count <= 10 else { return nil }
    for b in value.utf8 {
        guard b >= 48 && b <= 57 else { return nil }
        n = n * 10 + Int(b - 48)
    }
    return n
}

/// `[-+]digits[.digits]`: at most 12 digits, 6 of them after the point.
func decimalNumber(_ value: String) -> Double? {
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
        guard b >= 48 && b <= 57 else { return nil }
        digits += 1
        guard digits <= 12 else { return nil }
        if seenPoint {
            guard scale < 1_000_000 else { return nil }
            fraction = fraction * 10 + Int64(b - 48)
            scale *= 10
        } else {
            whole = whole * 10 + Int64(b - 48)
        }
    }
    guard digits > 0 else { return nil }
    let v = Double(whole) + Double(fraction) / Double(scale)
    return negative ? -v : v
}

public func parseGPIOLine(_ value: String) -> GPIOLine? {
    guard value.utf8.allSatisfy({ $0 > 32 && $0 != 127 }) else { return nil }
    guard let colon = value.lastIndex(ofByte: UInt8(ascii: ":")) else { return .name(value) }
    let chip = String(value.bytes(from: value.startIndex, to: colon))
    guard !chip.isEmpty, let offset = wholeNumber(String(value.bytes(from: value.utf8.index(after: colon), to: value.endIndex))),
          offset <= 1023 else { return nil }
    return .chip(chip, offset: offset)
}

func parseHostPort(_ value: String) -> HostPort? {
    var text = Substring(value)
    if asciiEqualIgnoringCase(Substring(text.utf8.prefix(5)), "stun:") { text = Substring(text.utf8.dropFirst(5)) }
    guard let (host, portText) = splitHostPort(text) else { return nil }
    guard !host.isEmpty, host.utf8.allSatisfy({ $0 > 32 && $0 != 127 && $0 != 47 }) else { return nil }
    guard let port = wholeNumber(String(portText)), (1...65_535).contains(port) else { return nil }
    return HostPort(host: String(host), port: UInt16(port))
}

extension Parser where Value == [ICEServerURL] {
    /// `turn:turn.example.net:3478?transport=tcp, turns:turn.example.net` (RFC 7064/7065).
    static var iceServers: Parser {
        let url = Parser<ICEServerURL>(metavar: "URL", expected: "", example: "") { v in
            do throws(ICEError) { return try ICEServerURL(parsing: v) } catch { return nil }
        }
        return .list(of: url, metavar: "URLS",
                     expected: "a comma list of stun:, turn: or turns: URLs (turn:host[:port][?transport=udp|tcp], turns:host[:port])",
                     example: "turn:turn.example.net:3478?transport=tcp, turns:turn.example.net")
    }
}
