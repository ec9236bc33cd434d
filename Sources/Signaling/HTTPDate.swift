import Wire

/// HTTP-date (RFC 9110 §5.6.7) and `Retry-After` (RFC 9110 §10.2.3).
///
/// Recipients must accept all three historic formats, so all three are parsed:
///
///     Sun, 06 Nov 1994 08:49:37 GMT    ; IMF-fixdate (the one senders must use)
///     Sunday, 06-Nov-94 08:49:37 GMT   ; obsolete RFC 850 format
///     Sun Nov  6 08:49:37 1994         ; ANSI C's asctime() format
///
/// Pure: the wall-clock time a date is compared with comes in as Unix seconds.
public enum HTTPDate {
    static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    static let shortDays = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    static let longDays = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

    /// Unix seconds (UTC) of an HTTP-date, or nil when `text` is none of the three
    /// formats or names an impossible date or time. `now` (Unix seconds) is needed only
    /// for the RFC 850 format's two-digit year: RFC 9110 §5.6.7 says a year that appears
    /// to be more than 50 years in the future is the most recent past year with those
    /// two digits.
    public static func parse(_ text: String, now: Int64 = 0) -> Int64? {
        // Month and day names match case-insensitively (RFC 9110 §5.6.7): tokens are
        // ASCII-lowercased, then compared byte for byte.
        let tokens = text.split(byte: UInt8(ascii: " "), omittingEmptySubsequences: true).map { lowercasedASCII(String($0)) }
        switch tokens.count {
        case 6:
            // IMF-fixdate: day-name "," SP date1 SP time-of-day SP GMT, date1 = 2DIGIT SP month SP 4DIGIT
            guard tokens[0].endsWithBytes(","), shortDays.containsBytes(equalTo: Substring(tokens[0].utf8.dropLast())), tokens[5].bytesEqual("gmt"),
                  tokens[1].utf8.count == 2, tokens[3].utf8.count == 4,
                  let day = digits(tokens[1]), let month = month(tokens[2]), let year = digits(tokens[3])
            else { return nil }
            return assemble(year: year, month: month, day: day, time: tokens[4])
        case 4:
            // rfc850-date: day-name-l "," SP date2 SP time-of-day SP GMT, date2 = 2DIGIT "-" month "-" 2DIGIT
            guard tokens[0].endsWithBytes(","), longDays.containsBytes(equalTo: Substring(tokens[0].utf8.dropLast())), tokens[3].bytesEqual("gmt") else { return nil }
            let parts = tokens[1].split(byte: UInt8(ascii: "-"), omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3, parts[0].utf8.count == 2, parts[2].utf8.count == 2,
                  let day = digits(parts[0]), let month = month(parts[1]), let yy = digits(parts[2])
            else { return nil }
            // Start in the century of `now`, then step back when more than 50 years ahead.
            let currentYear = civilDate(daysSinceEpoch: floorDiv(now, 86_400)).year
            var year = currentYear - currentYear % 100 + yy
            if year > currentYear + 50 { year -= 100 }
            return assemble(year: year, month: month, day: day, time: tokens[2])
        case 5:
            // asctime-date: day-name SP month SP day SP time-of-day SP year, where the
            // day is "SP 1DIGIT" or 2DIGIT (the padding space vanished in the split).
            guard shortDays.containsBytes(equalTo: tokens[0]), let month = month(tokens[1]),
                  (1...2).contains(tokens[2].utf8.count), tokens[4].utf8.count == 4,
                  let day = digits(tokens[2]), let year = digits(tokens[4])
            else { return nil }
            return assemble(year: year, month: month, day: day, time: tokens[3])
        default:
            return nil
        }
    }

    /// `HH:MM:SS` plus the date, range-checked (second 60 tolerated for a leap second).
    static func assemble(year: Int64, month: Int64, day: Int64, time: String) -> Int64? {
        let hms = time.split(byte: UInt8(ascii: ":"), omittingEmptySubsequences: false).map(String.init)
        guard hms.count == 3, hms.allSatisfy({ $0.utf8.count == 2 }),
              let h = digits(hms[0]), let m = digits(hms[1]), let s = digits(hms[2]),
              h <= 23, m <= 59, s <= 60, year >= 1, day >= 1, day <= daysIn(month: month, year: year)
        else { return nil }
        return daysSinceEpoch(year: year, month: month, day: day) * 86_400 + h * 3600 + m * 60 + s
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    static func month(_ name: String) -> Int64? {
        months.firstIndex { $0.bytesEqual(name) }.map { Int64($0) + 1 }
    }

    /// A run of 1–9 ASCII digits (no sign, no spaces), else nil.
    static func digits(_ s: String) -> Int64? {
        let bytes = Array(s.utf8)
        guard !bytes.isEmpty, bytes.count <= 9 else { return nil }
        var v: Int64 = 0
        for b in bytes {
            guard b >= 48 && b <= 57 else { return nil }
            v = v * 10 + Int64(b - 48)
        }
        return v
    }

    static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 { a >= 0 ? a / b : (a - b + 1) / b }
}

extension HTTPResponse {
    /// The longest `Retry-After` delay honoured: about 31 years, so the nanosecond
    /// `Duration` cannot overflow. A caller applies its own, much smaller cap.
    public static let maxRetryAfter = Duration.seconds(999_999_999)

    /// How long the server asks us to wait (RFC 9110 §10.2.3), typically on 503 or 429:
    /// `Retry-After: 120` (delay-seconds) or `Retry-After: <HTTP-date>`, measured from
    /// `now` (Unix seconds from the real-time clock; a date in the past means no wait).
    /// Nil when the header is absent or is neither form.
    ///
    /// OpenAI's API also sends `retry-after-ms` (milliseconds, possibly fractional),
    /// which is read first, and writes `Retry-After` with fractional seconds ("1.5");
    /// both are honoured as OpenAI's own SDKs do (openai-node `shouldRetry`/`retryRequest`).
    public func retryAfter(now: Int64) -> Duration? {
        if let ms = headers["retry-after-ms"].flatMap({ Self.decimalNanoseconds($0.trimmingSpaces, scale: 1_000_000) }) {
            return ms
        }
        guard let raw = headers["Retry-After"] else { return nil }
        let value = raw.trimmingSpaces
        let bytes = Array(value.utf8)
        if !bytes.isEmpty, bytes.allSatisfy({ $0 >= 48 && $0 <= 57 }) {
            // delay-seconds = 1*DIGIT: any number of digits, so clamp instead of overflowing.
            if bytes.count > 9 { return Self.maxRetryAfter }
            return .seconds(HTTPDate.digits(value) ?? 0)
        }
        if let fractional = Self.decimalNanoseconds(value, scale: 1_000_000_000) { return fractional }
        guard let date = HTTPDate.parse(value, now: now) else { return nil }
        return date <= now ? .zero : min(.seconds(date - now), Self.maxRetryAfter)
    }

    /// `x-should-retry: true|false`: the server's own word on whether a retry can help
    /// (OpenAI's SDKs obey it before looking at the status). Nil when absent or other.
    public var shouldRetry: Bool? {
        // Unwrapped first: a `switch` over the String itself matches through Wire's
        // byte-wise `~=`; over a `String?` it would take the generic Equatable one.
        guard let value = headers["x-should-retry"]?.trimmingSpaces else { return nil }
        switch value {
        case "true": return true
        case "false": return false
        default: return nil
        }
    }

    /// "1.5" (or "250") in units of `scale` nanoseconds, as a Duration: digits, at most
    /// one '.', at most 9 digits each side (clamped to `maxRetryAfter`). Nil otherwise.
    static func decimalNanoseconds(_ s: String, scale: Int64) -> Duration? {
        let parts = s.split(byte: UInt8(ascii: "."), maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count <= 2, let whole = parts.first, !whole.isEmpty || parts.count == 2 else { return nil }
        guard whole.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), whole.utf8.count <= 9 else {
            return whole.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) ? maxRetryAfter : nil
        }
        var n = (HTTPDate.digits(String(whole)) ?? 0) * scale
        if parts.count == 2 {
            let frac = parts[1]
            guard !frac.isEmpty, frac.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
            var unit = scale
            for b in frac.utf8.prefix(9) {
                unit /= 10
                n += Int64(b - 48) * unit
            }
        }
        return min(Duration(nanoseconds: n), maxRetryAfter)
    }
}
