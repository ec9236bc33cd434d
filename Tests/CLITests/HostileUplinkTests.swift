import Testing
import Foundation
import Glibc
import CSystem
import Platform
import Signaling
import Audio
import Devices
import Wire
@testable import linnet
@testable import Runtime

// Stale capture audio is dropped, RTP time jumps.

@Suite struct StaleUplinkTests {
    /// Frames that waited 2 s behind a stall (old capture times) are dropped on the loop
    /// and their time skipped; the fresh ones after them are sent, and the RTP time
    /// skipped covers the gap too, so sent + skipped frames span the capture time.
    @Test func framesWithOldCaptureTimesAreDroppedAndTheirTimeSkipped() throws {
        let loop = try EventLoop()
        let audio = AudioIO(loop: loop, duplex: nil, generator: SilenceSource(), mute: MuteGate(), meter: nil)
        var sent = 0, skipped = 0
        audio.onFrame = { _ in sent += 1 }
        audio.onSkip = { skipped += $0 }
        let device = DeviceFormat(sampleFormat: .s16LE, sampleRate: 48_000, channels: 1, periodFrames: 480)
        let pipeline = try CapturePipeline(device: device, rate: .hz48000, channel: nil, chain: HookChain(), notify: try EventFD())
        pipeline.captureStarted(device)
        let period = [Int16](repeating: 1000, count: 480)
        let now = loop.now
        func feed(_ t: Instant) { period.withUnsafeBytes { pipeline.captured($0, frames: 480, format: device, time: t) } }
        // 200 ms captured 2 s ago (held behind a stall), then 40 ms captured just now.
        for k in 0..<20 { feed(now - .milliseconds(2_000 - Int64(k) * 10)) }
        for k in 0..<4 { feed(now - .milliseconds(30 - Int64(k) * 10)) }
        audio.drain(pipeline)
        #expect(sent == 2)
        // 10 stale frames, then the gap from 1800 ms ago to 30 ms ago: 89 frames.
        #expect(skipped == 10 + 89)
        #expect(audio.clock.stalls == 1 && audio.clock.staleFrames == 10)
    }

    /// A loop-paced source (the demo's voice) whose ticks come late after the loop was
    /// held for a second does not send the missed ticks in a burst (before: one per
    /// turn, fifty in a row); it sends on from now and skips the RTP time it missed.
    @Test func lateTicksOfAGeneratedSourceAreNotCaughtUp() throws {
        let loop = try EventLoop()
        let audio = AudioIO(loop: loop, duplex: nil, generator: SilenceSource(), mute: MuteGate(), meter: nil)
        var sent = 0, skipped = 0
        audio.onFrame = { _ in sent += 1 }
        audio.onSkip = { skipped += $0 }
        try audio.start()
        turnLoop(loop) { sent >= 3 }
        // A loaded machine (the ASan pass runs suites side by side on two cores) can
        // pause this thread 200 ms before the hold too: count only the hold's stall.
        let stallsBefore = audio.clock.stalls
        // Hold the loop while a paced capture thread delivers 100 periods of 10 ms: the
        // wait is on that output, the way a blocking call would hold the loop.
        try holdUntilPeriods(100)
        let before = sent
        // Turns that do not wait: each would fire one overdue tick if they were caught up.
        for _ in 0..<60 { try loop.runOnce(maxWait: .zero) }
        audio.stop()
        #expect(sent - before <= 3, "\(sent - before) frames sent in 60 quick turns after the hold")
        #expect(skipped >= 45, "RTP time skipped \(skipped) frames for a hold of at least 1 s")
        #expect(audio.clock.stalls - stallsBefore == 1)
    }

    /// Blocks (not turning any loop) until a paced file capture thread has delivered
    /// `periods` periods (10 ms each).
    func holdUntilPeriods(_ periods: Int) throws {
        let input = temporary("hold-clock.wav")
        defer { unlink(input) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16, samples: [Int32](repeating: 0, count: 4_800))
        let sink = PeriodCounter(target: periods)
        let thread = try CaptureThread(input: .file(input, paced: true, loop: true), sink: sink)
        try thread.start()
        var p = pollfd(fd: sink.reached.fd, events: Int16(POLLIN), revents: 0)
        while poll(&p, 1, 30_000) < 0 && errno == EINTR {}
        thread.stop()
    }
}

/// Counts capture periods and signals an eventfd once `target` have come.
final class PeriodCounter: CaptureSink, @unchecked Sendable {
    let target: Int
    var count = 0
    let reached = try! EventFD()
    init(target: Int) { self.target = target }
    func captureStarted(_ format: DeviceFormat) {}
    func captureStopped(_ format: DeviceFormat) {}
    func captured(_ samples: UnsafeRawBufferPointer, frames: Int, format: DeviceFormat, time: Instant) {
        count += 1
        if count == target { reached.signal() }
    }
}
