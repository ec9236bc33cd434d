// The pacing of a stream without a device clock (a file, the discard sink): absolute
// deadlines on the threads' clock, restarted rather than caught up after a stall.
import Wire

/// Paces a loop at one period per `period` nanoseconds on a `DeviceClock`, with
/// absolute deadlines so a late wake-up does not accumulate drift.
///
/// Falling more than `maxLag` behind (the process was stopped, SIGSTOP; the thread was
/// starved or frozen) is not caught up: absolute deadlines would then all be in the past
/// and the periods missed would go out as fast as the CPU goes (a 10 s stop became a
/// burst of 117 packets). A microphone does not deliver the past either: the schedule
/// restarts from now, and the gap shows in the capture times, where the loop moves RTP
/// time on by it (`UplinkClock`).
struct Pacer {
    var next: Int64
    let period: Int64
    /// Times the schedule was restarted after falling behind.
    private(set) var resyncs = 0
    static let maxLag: Int64 = 200_000_000

    init(periodFrames: Int, sampleRate: Int, now: Int64) {
        period = Int64(periodFrames) * 1_000_000_000 / Int64(max(sampleRate, 1))
        next = now
    }

    /// The next deadline to sleep until, given the time `now` (pure, for tests).
    mutating func advance(now: Int64) -> Int64 {
        next += period
        if now - next > Pacer.maxLag {
            next = now
            resyncs += 1
        }
        return next
    }

    /// Sleeps on `clock` until the next deadline and returns it (nanoseconds on that
    /// clock): the time a paced stream's period is due, its own clock.
    @discardableResult
    mutating func wait(on clock: DeviceClock) -> Int64 {
        let deadline = advance(now: clock.now().nanoseconds)
        clock.wait(until: deadline)
        return deadline
    }
}
