// What a device has cost today, and the caps that bound it: connected minutes and the
// provider's tokens, counted per local day (the fleet operator's budget is daily, and a
// kiosk's day is the building's). Pure: the core is told the local calendar (the
// runtime measures the wall clock and the zone's offset); the runtime keeps the count in
// the state directory so that a cap survives a restart.
import Wire
import JSON

/// The local calendar as the core needs it: on which local day an instant of the
/// monotonic clock falls, and when a day begins. A zone's offset that changes while the
/// process runs (summer time) moves the day's start by that change until the runtime
/// hands in the new offset (it does at each status write).
public struct LocalCalendar: Sendable, Equatable {
    /// Local time, in seconds since 1970-01-01 00:00 in the zone, at the monotonic clock's zero.
    public var localSecondsAtZero: Int64

    public init(localSecondsAtZero: Int64) { self.localSecondsAtZero = localSecondsAtZero }

    /// The local day (days since 1970-01-01 local) that `t` falls on.
    public func day(at t: Instant) -> Int {
        let local = localSecondsAtZero &* 1_000_000_000 &+ t.nanoseconds, length: Int64 = 86_400_000_000_000
        return Int(local >= 0 ? local / length : (local - length + 1) / length)
    }

    /// When local day `day` begins, on the monotonic clock.
    public func start(ofDay day: Int) -> Instant {
        .zero + .seconds(Int64(day) * 86_400 - localSecondsAtZero)
    }
}

/// One local day's usage.
public struct DailyUsage: Sendable, Equatable {
    /// Days since 1970-01-01 in local time.
    public var day: Int
    public var connectedMilliseconds: Int64 = 0
    /// Input and output tokens the provider reported (`response.done`'s usage).
    public var tokens: Int64 = 0

    public init(day: Int, connectedMilliseconds: Int64 = 0, tokens: Int64 = 0) {
        self.day = day
        self.connectedMilliseconds = connectedMilliseconds
        self.tokens = tokens
    }

    /// The state file's bytes: one JSON object and a newline.
    public var json: [UInt8] {
        var o = JSONObject()
        o["date"] = .string(DailyUsage.date(day))
        o["day"] = .number(JSONNumber(day))
        o["connected_ms"] = .number(JSONNumber(Double(connectedMilliseconds)))
        o["tokens"] = .number(JSONNumber(Double(tokens)))
        var bytes = JSONValue.object(o).serialized()
        bytes.append(10)
        return bytes
    }

    /// The state file read back, or nil when it is not one (cut short by a power cut,
    /// edited by hand, another program's): the count then starts again, and the caller
    /// says so. Counts that are negative, fractional or beyond any day's are refused.
    public static func parse(_ bytes: [UInt8]) -> DailyUsage? {
        guard bytes.count <= 4096, let v = try? JSONValue.parse(bytes), v.object != nil,
              let day = v["day"]?.int, day >= 0, day < 1_000_000,
              let ms = v["connected_ms"]?.int, ms >= 0, ms <= 86_400_000,
              let tokens = v["tokens"]?.int, tokens >= 0, tokens <= 1_000_000_000_000 else { return nil }
        return DailyUsage(day: day, connectedMilliseconds: Int64(ms), tokens: Int64(tokens))
    }

    /// `day` as a civil date, YYYY-MM-DD (the proleptic Gregorian calendar; days from
    /// civil, inverted: Hinnant, "chrono-compatible low-level date algorithms").
    public static func date(_ day: Int) -> String {
        let z = day + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(y)-\(two(m))-\(two(d))"
    }
}

/// The optional daily caps (`max-daily-minutes`, `max-daily-tokens`).
public struct DailyCaps: Sendable, Equatable {
    public var minutes: Int?
    public var tokens: Int?

    public init(minutes: Int? = nil, tokens: Int? = nil) {
        self.minutes = minutes
        self.tokens = tokens
    }

    public var isEmpty: Bool { minutes == nil && tokens == nil }

    /// Why `usage` has reached a cap, or nil while under both.
    public func reached(_ usage: DailyUsage) -> String? {
        if let m = minutes, usage.connectedMilliseconds >= Int64(m) * 60_000 {
            return "max-daily-minutes reached (\(usage.connectedMilliseconds / 60_000) of \(m) min connected today)"
        }
        if let t = tokens, usage.tokens >= Int64(t) {
            return "max-daily-tokens reached (\(usage.tokens) of \(t) tokens today)"
        }
        return nil
    }

    /// Connected time left today before the minutes cap (nil: no minutes cap).
    public func connectedTimeLeft(_ usage: DailyUsage) -> Duration? {
        minutes.map { .milliseconds(max(Int64($0) * 60_000 - usage.connectedMilliseconds, 0)) }
    }
}
