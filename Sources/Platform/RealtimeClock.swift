import CSystem

/// The wall clock (`CLOCK_REALTIME`), for what must be judged against calendar time:
/// certificate validity and `Retry-After` dates. Never for timers or intervals (those use
/// `MonotonicClock`, which a clock step cannot move).
public enum RealtimeClock {
    /// Seconds since 1970-01-01 00:00:00 UTC.
    public static func unixSeconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec)
    }

    /// The local zone's offset from UTC at `unix` seconds, in seconds (east positive;
    /// summer time included), as the C library reads it from TZ or /etc/localtime.
    public static func utcOffsetSeconds(at unix: Int64) -> Int64 {
        var t = time_t(unix)
        var parts = tm()
        guard localtime_r(&t, &parts) != nil else { return 0 }
        return Int64(parts.tm_gmtoff)
    }
}
