/// A point on the monotonic clock, in nanoseconds since an arbitrary origin.
///
/// Only the monotonic clock drives timers, so a wall-clock step (NTP, RTC fix on a board
/// that booted without network) never fires or stalls a timer.
public struct Instant: Comparable, Hashable, Sendable, CustomStringConvertible {
    public var nanoseconds: Int64

    @inlinable public init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }

    public static let zero = Instant(nanoseconds: 0)
    /// Later than any real deadline: "no timeout requested".
    public static let distantFuture = Instant(nanoseconds: Int64.max / 2)

    @inlinable public static func < (a: Instant, b: Instant) -> Bool { a.nanoseconds < b.nanoseconds }

    @inlinable public static func + (a: Instant, d: Duration) -> Instant {
        Instant(nanoseconds: a.nanoseconds &+ d.nanoseconds)
    }
    @inlinable public static func - (a: Instant, d: Duration) -> Instant {
        Instant(nanoseconds: a.nanoseconds &- d.nanoseconds)
    }
    @inlinable public static func - (a: Instant, b: Instant) -> Duration {
        Duration(nanoseconds: a.nanoseconds &- b.nanoseconds)
    }
    @inlinable public static func += (a: inout Instant, d: Duration) { a = a + d }

    public var description: String { "t+" + Duration(nanoseconds: nanoseconds).description }
}

/// A span of monotonic time in nanoseconds. (Linnet's own type: `Swift.Duration` is
/// 128-bit attoseconds, more than a protocol timer needs and heavier in Embedded Swift.)
public struct Duration: Comparable, Hashable, Sendable, CustomStringConvertible {
    public var nanoseconds: Int64

    @inlinable public init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }

    @inlinable public static func nanoseconds(_ n: Int64) -> Duration { Duration(nanoseconds: n) }
    @inlinable public static func microseconds(_ n: Int64) -> Duration { Duration(nanoseconds: n &* 1_000) }
    @inlinable public static func milliseconds(_ n: Int64) -> Duration { Duration(nanoseconds: n &* 1_000_000) }
    @inlinable public static func seconds(_ n: Int64) -> Duration { Duration(nanoseconds: n &* 1_000_000_000) }

    public static let zero = Duration(nanoseconds: 0)

    @inlinable public var milliseconds: Int64 { nanoseconds / 1_000_000 }
    @inlinable public var microseconds: Int64 { nanoseconds / 1_000 }

    @inlinable public static func < (a: Duration, b: Duration) -> Bool { a.nanoseconds < b.nanoseconds }
    @inlinable public static func + (a: Duration, b: Duration) -> Duration { Duration(nanoseconds: a.nanoseconds &+ b.nanoseconds) }
    @inlinable public static func - (a: Duration, b: Duration) -> Duration { Duration(nanoseconds: a.nanoseconds &- b.nanoseconds) }
    @inlinable public static func * (a: Duration, k: Int64) -> Duration { Duration(nanoseconds: a.nanoseconds &* k) }
    @inlinable public static func / (a: Duration, k: Int64) -> Duration { Duration(nanoseconds: a.nanoseconds / k) }

    /// Milliseconds with three decimals, e.g. `12.345ms`; seconds past 10 s.
    public var description: String {
        let negative = nanoseconds < 0
        let magnitude = negative ? 0 &- nanoseconds : nanoseconds
        let sign = negative ? "-" : ""
        if magnitude >= 10_000_000_000 {
            return sign + decimal(magnitude / 1_000_000, places: 3) + "s"
        }
        return sign + decimal(magnitude / 1_000, places: 3) + "ms"
    }
}

/// `value / 10^places` printed with `places` decimals, without floating point.
@usableFromInline
func decimal(_ value: Int64, places: Int) -> String {
    var scale: Int64 = 1
    for _ in 0..<places { scale &*= 10 }
    let whole = value / scale
    var frac = String(value % scale)
    while frac.utf8.count < places { frac = "0" + frac }
    return String(whole) + "." + frac
}
