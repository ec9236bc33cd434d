// The clock the audio threads read and wait on: the monotonic clock on a board, a
// test's virtual clock in the device tests (which then run on time they advance
// themselves, exact and independent of how fast the machine or a sanitizer is).
import CSystem
// CGPIOD for timespec's memberwise initializer: Embedded Swift credits it to one of the
// C modules that declare it (which one depends on the order this module's files are
// compiled in; here libgpiod's header), and refuses it in a file that does not import
// that module.
import CGPIOD
import Wire
import Platform

/// A clock for the audio threads: `now` and an absolute wait, as C function pointers
/// with a context, so a call is one indirect call (no existential, no closure context to
/// retain) on the real-time thread.
///
/// `wait(until:)` may return early (a signal; a test clock that was let go): callers
/// read `now` again rather than assume the deadline passed.
public struct DeviceClock {
    public typealias Now = @convention(c) (UnsafeMutableRawPointer?) -> Int64
    public typealias WaitUntil = @convention(c) (UnsafeMutableRawPointer?, Int64) -> Void

    /// Passed to both functions; whoever makes the clock keeps it alive while a thread
    /// uses it.
    public let context: UnsafeMutableRawPointer?
    let readNow: Now
    let waitUntil: WaitUntil

    public init(context: UnsafeMutableRawPointer?, now: Now, waitUntil: WaitUntil) {
        self.context = context
        readNow = now
        self.waitUntil = waitUntil
    }

    /// The monotonic clock (`CLOCK_MONOTONIC`), waited on with `clock_nanosleep`.
    public static var monotonic: DeviceClock {
        DeviceClock(context: nil, now: { _ in MonotonicClock.now().nanoseconds }, waitUntil: { _, deadline in
            var ts = timespec(tv_sec: time_t(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
            clock_nanosleep(CLOCK_MONOTONIC, Int32(TIMER_ABSTIME), &ts, nil)
        })
    }

    @inline(__always)
    public func now() -> Instant { Instant(nanoseconds: readNow(context)) }

    /// Blocks until `deadline` (nanoseconds on this clock), or earlier (see above).
    @inline(__always)
    public func wait(until deadline: Int64) { waitUntil(context, deadline) }
}
