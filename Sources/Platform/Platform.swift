/// Platform: the one place (with `Devices`) where Linnet touches the operating system.
///
/// Design decisions:
/// - Every system call goes through `sys()`, which retries `EINTR`, reports would-block
///   as a value and turns errno into a typed `SystemError` (STYLE.md 5).
/// - One `poll()` loop drives everything off the real-time threads: sockets, a timerfd
///   armed to the earliest deadline, and an eventfd other threads write to wake it.
/// - Only the monotonic clock feeds timers, so a wall-clock step never fires one.
/// - POSIX comes from the project's `CSystem` module map, not `Glibc`, so this module
///   compiles in Embedded Swift too.
import CSystem
import Wire

/// The monotonic clock (`CLOCK_MONOTONIC`).
public enum MonotonicClock {
    public static func now() -> Instant {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Instant(nanoseconds: Int64(ts.tv_sec) &* 1_000_000_000 &+ Int64(ts.tv_nsec))
    }
}

/// The value of an environment variable, or nil.
public func environment(_ name: String) -> String? {
    guard let p = getenv(name) else { return nil }
    return String(cString: p)
}

/// Fills `buffer` from the kernel's CSPRNG (getrandom(2)); for ICE passwords, SSRCs,
/// tie-breakers and seeds.
public func secureRandomBytes(_ buffer: UnsafeMutableRawBufferPointer) throws(SystemError) {
    var filled = 0
    while filled < buffer.count {
        let n = try sys("getrandom") { getrandom(buffer.baseAddress! + filled, buffer.count - filled, 0) }
        filled += n
    }
}

/// A `RandomNumberGenerator` over getrandom(2). If the kernel refuses (it cannot on any
/// Linux this runs on), it traps rather than hand out predictable secrets.
public struct SystemRandom: RandomNumberGenerator {
    public init() {}
    public mutating func next() -> UInt64 {
        var v: UInt64 = 0
        do throws(SystemError) {
            try withUnsafeMutableBytes(of: &v) { (b: UnsafeMutableRawBufferPointer) throws(SystemError) in
                try secureRandomBytes(b)
            }
        } catch {
            fatalError("getrandom failed")
        }
        return v
    }
}

/// The whole process environment (`environ`), for config layers read by prefix.
/// Names are keys compared byte for byte, as the kernel and libc's `getenv` compare them.
public func processEnvironment() -> [TextKey: String] {
    var out: [TextKey: String] = [:]
    guard var p = csystem_environ() else { return out }
    while let entry = p.pointee {
        let text = String(cString: entry)
        if let eq = text.firstIndex(ofByte: UInt8(ascii: "=")) {
            out[TextKey(text.bytes(from: text.startIndex, to: eq))] = String(text.bytes(from: text.utf8.index(after: eq), to: text.endIndex))
        }
        p += 1
    }
    return out
}
