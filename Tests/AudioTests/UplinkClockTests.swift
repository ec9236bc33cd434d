import Testing
import Wire
@testable import Audio

/// The uplink's frame clock on a manual clock: stale frames are
/// dropped rather than sent late in a burst, and RTP time jumps over capture gaps.
@Suite struct UplinkClockTests {
    let t0 = Instant(nanoseconds: 1_000_000_000)

    func at(_ ms: Int64) -> Instant { t0 + .milliseconds(ms) }

    @Test func steadyFramesAreSentWithNoSkip() {
        var c = UplinkClock()
        for k in 0..<100 {
            // Read jitter of up to 15 ms does not count as a gap.
            let t = at(Int64(k) * 20 + (k % 3 == 0 ? 15 : 0))
            #expect(c.admit(captureTime: t, now: t + .milliseconds(5)) == UplinkClock.Decision(skipBefore: 0, send: true))
        }
        #expect(c.stalls == 0 && c.staleFrames == 0 && c.gapFrames == 0)
    }

    /// The loop was held for 1 s while capture went on: the frames that waited behind it
    /// are dropped (each still moves RTP time on by 20 ms); the fresh ones are sent.
    @Test func framesOlderThan200msAreDroppedAndTheirTimeSkipped() {
        var c = UplinkClock()
        #expect(c.admit(captureTime: at(0), now: at(5)).send)
        let now = at(1_020)
        var skipped = 0, sent = 0
        for k in 1...50 {
            let d = c.admit(captureTime: at(Int64(k) * 20), now: now)
            skipped += d.framesToSkip
            if d.send { sent += 1 }
        }
        // Frames captured at 20…800 ms are more than 200 ms old at 1020 ms: 40 dropped.
        #expect(sent == 10 && skipped == 40)
        #expect(c.staleFrames == 40 && c.stalls == 1 && c.gapFrames == 0)
    }

    /// The process was stopped for 10 s (nothing captured meanwhile): the first frame
    /// after it comes with a capture time 10 s on, and RTP time jumps by the gap.
    @Test func aCaptureGapSkipsRTPTimeAndCountsOneStall() {
        var c = UplinkClock()
        #expect(c.admit(captureTime: at(0), now: at(2)).send)
        #expect(c.admit(captureTime: at(20), now: at(22)).send)
        let d = c.admit(captureTime: at(10_040), now: at(10_042))
        #expect(d == UplinkClock.Decision(skipBefore: 500, send: true))
        #expect(c.stalls == 1 && c.gapFrames == 500)
        #expect(c.admit(captureTime: at(10_060), now: at(10_062)) == UplinkClock.Decision(skipBefore: 0, send: true))
    }

    /// A stop with frames from before it still in the ring: those are stale (one stall),
    /// and the gap to the first fresh frame is the same stop, not a second stall.
    @Test func staleRunThenGapIsOneStall() {
        var c = UplinkClock()
        #expect(c.admit(captureTime: at(0), now: at(1)).send)
        let now = at(10_000)
        #expect(c.admit(captureTime: at(20), now: now) == UplinkClock.Decision(skipBefore: 0, send: false))
        #expect(c.admit(captureTime: at(40), now: now) == UplinkClock.Decision(skipBefore: 0, send: false))
        let d = c.admit(captureTime: at(9_990), now: now)
        #expect(d.send && d.skipBefore == 497)
        #expect(c.stalls == 1 && c.staleFrames == 2)
        // A later, separate stall counts again.
        _ = c.admit(captureTime: at(10_010), now: at(10_011))
        _ = c.admit(captureTime: at(12_010), now: at(12_011))
        #expect(c.stalls == 2)
    }

    /// RTP time over the whole run follows the capture clock: frames sent + frames
    /// skipped = elapsed capture time / 20 ms.
    @Test func rtpTimeFollowsTheCaptureClock() {
        var c = UplinkClock()
        var rtpFrames = 0, dropped = 0
        var t: Int64 = 0
        var heldUntil: Int64 = 0
        for k in 0..<1_000 {
            if k == 300 { t += 3_000 }               // a 3 s stop: nothing captured
            if k == 600 { heldUntil = t + 700 }      // the loop held 700 ms: frames pile up
            let now = max(heldUntil, t + 2)          // then drains them all at once
            let d = c.admit(captureTime: at(t), now: at(now))
            rtpFrames += d.framesToSkip + (d.send ? 1 : 0)
            if !d.send { dropped += 1 }
            t += 20
        }
        #expect(rtpFrames == Int(t / 20))
        #expect(dropped == 25 && c.stalls == 2 && c.gapFrames == 150)
    }
}
