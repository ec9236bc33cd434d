import Testing
import Foundation
import Synchronization
import CAllocCounter
import Wire
import Audio
import Platform
@testable import Devices

/// A capture hook that keeps what it was given and the reference it found beside it,
/// frame by frame, in preallocated storage; it signals `done` once it has `frames`.
final class ReferenceRecorder: AudioHook, @unchecked Sendable {
    let frames: Int
    let samplesPerFrame: Int
    let captured: UnsafeMutableBufferPointer<Int16>
    let reference: UnsafeMutableBufferPointer<Int16>
    let coverage: UnsafeMutableBufferPointer<Int>
    let times: UnsafeMutableBufferPointer<Int64>
    let count = Atomic<Int>(0)
    let done = try! EventFD()
    unowned(unsafe) var source: PlaybackReference? = nil

    init(frames: Int, samplesPerFrame: Int = 480) {
        self.frames = frames
        self.samplesPerFrame = samplesPerFrame
        captured = .allocate(capacity: frames * samplesPerFrame)
        captured.initialize(repeating: 0)
        reference = .allocate(capacity: frames * samplesPerFrame)
        reference.initialize(repeating: 0)
        coverage = .allocate(capacity: frames)
        coverage.initialize(repeating: 0)
        times = .allocate(capacity: frames)
        times.initialize(repeating: 0)
    }

    deinit {
        captured.deallocate()
        reference.deallocate()
        coverage.deallocate()
        times.deallocate()
    }

    func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let k = count.load(ordering: .relaxed)
        guard k < frames, let source else { return .pass }
        let r = source.samples
        for i in 0..<samplesPerFrame {
            captured[k * samplesPerFrame + i] = samples[i]
            reference[k * samplesPerFrame + i] = r[i]
        }
        coverage[k] = source.coverage
        times[k] = info.captureTime.nanoseconds
        count.store(k + 1, ordering: .releasing)
        if k + 1 == frames { done.signal() }
        return .pass
    }
}

/// A playback hook that keeps each frame's `captureTime` (when it will be heard).
final class HeardTimes: AudioHook, @unchecked Sendable {
    let times: UnsafeMutableBufferPointer<Int64>
    let count = Atomic<Int>(0)
    init(capacity: Int) { times = .allocate(capacity: capacity); times.initialize(repeating: 0) }
    deinit { times.deallocate() }
    func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let k = count.load(ordering: .relaxed)
        if k < times.count {
            times[k] = info.captureTime.nanoseconds
            count.store(k + 1, ordering: .releasing)
        }
        return .pass
    }
}

/// Seeded white noise: its autocorrelation is a spike, so a cross-correlation peak
/// says the lag to the sample.
final class Noise {
    var rng = SeededRandom(seed: 77)
    func fill(_ out: UnsafeMutableBufferPointer<Int16>, _ n: Int) -> Int {
        for i in 0..<n { out[i] = Int16(truncatingIfNeeded: Int(rng.next() % 16_000) - 8_000) }
        return n
    }
}

/// The lag (of `y` after `x`) with the largest correlation in `range`, from every
/// `step`-th sample (white noise: any subset of samples shows the peak).
func strongestLag(_ x: [Int16], _ y: [Int16], range: ClosedRange<Int>, step: Int = 3) -> (lag: Int, value: Double) {
    var best = 0, bestValue = -Double.infinity
    for lag in range {
        var s = 0.0
        var i = max(0, -lag)
        while i < x.count && i + lag < y.count { s += Double(x[i]) * Double(y[i + lag]); i += step }
        if s > bestValue { bestValue = s; best = lag }
    }
    return (best, bestValue)
}

/// Runs `loop` until `event` fires.
func run(_ loop: EventLoop, until event: EventFD) throws {
    loop.watch(fd: event.fd) { _ in loop.stop() }
    try loop.run()
}

@Suite(.serialized) struct DuplexTests {
    static let mono48 = DeviceFormat(sampleFormat: .s16LE, sampleRate: 48_000, channels: 1, periodFrames: 480)

    /// Through both real audio threads with stand-in devices of known delays: a speaker
    /// whose buffer holds 50 ms plus 30 ms of DAC path, a microphone with 5 ms of ADC
    /// path, 7 ms of air between them. The reference a capture hook gets beside each
    /// capture frame is what the speaker played at the instant the frame was captured,
    /// so the microphone's signal trails it by exactly the air's 7 ms (336 samples):
    /// the devices' own delays are taken out, to the sample.
    @Test func referenceArrivesAlignedWithTheCapture() throws {
        let air = FakeAir()
        let speaker = FakeSpeaker(air: air, bufferFrames: 2_400, latencyFrames: 1_440)
        let microphone = FakeMicrophone(air: air, latencyFrames: 240, acousticDelayFrames: 336)
        let recorder = ReferenceRecorder(frames: 120)
        let heard = HeardTimes(capacity: 4_096)
        let capture = HookChain(), playback = HookChain()
        try capture.add(recorder)
        try playback.add(heard)
        let duplex = try DuplexAudio(configuration: DuplexConfiguration(capture: nil, playback: .discard(Self.mono48)),
                                     capturePCM: microphone, playbackPCM: speaker, captureChain: capture, playbackChain: playback)
        recorder.source = duplex.reference
        let loop = try EventLoop()
        let noise = Noise()
        duplex.attach(to: loop, frameSamples: 960, uplink: { _, _ in }, downlink: { noise.fill($0, 960) })
        try duplex.start()
        try run(loop, until: recorder.done)
        duplex.stop()

        // After the first 20 frames (the speaker filling up): every frame had a reference,
        // except where the speaker really ran dry. On a loaded machine (CI shares two
        // cores) the playback thread can starve; an underrun leaves up to a period of
        // silence in what was played, so it may cost the two capture frames it straddles.
        // A frame's play time comes from the smoothed device timelines, so consecutive
        // frames may leave a gap or overlap of a sample or two: "whole" is to within
        // 8 samples (0.17 ms), far less than any echo canceller's filter notices.
        let from = 20
        let covered = (from..<recorder.frames).filter { recorder.coverage[$0] >= 480 - 8 }.count
        let short = (from..<recorder.frames).filter { recorder.coverage[$0] < 480 - 8 }.map { "\($0):\(recorder.coverage[$0])" }
        let dryBefore = speaker.underruns.load(ordering: .relaxed)
        #expect(covered >= recorder.frames - from - 2 - 2 * dryBefore,
                "\(covered) of \(recorder.frames - from) frames had a whole reference (\(dryBefore) underruns; short frame:samples \(short))")
        let x = Array(recorder.reference[(from * 480)..<(from * 480 + 24_000)])
        let y = Array(recorder.captured[(from * 480)..<(from * 480 + 24_000)])
        let (lag, _) = strongestLag(x, y, range: -960...960)
        // Within 3 samples: the reference keeps its sub-sample phase with 1.5 samples of
        // hysteresis (PlaybackReference.steadyOffset: the canceller needs it steady more
        // than exact), where it used to round each frame to the nearest, within 0.5.
        // Under a sanitizer (scripts/sanitize.sh sets SANITIZER_UNDER_TEST) the threads
        // run late and the timelines wander further: printed, not judged (an ASan run on
        // a fresh machine measured 3 samples, and 32 of 50 stretches within 2).
        let sanitized = ProcessInfo.processInfo.environment["SANITIZER_UNDER_TEST"] != nil
        if sanitized {
            print("DuplexTests under a sanitizer: the microphone trails the reference by \(lag) samples; the air is 336")
        } else {
            #expect(abs(lag - 336) <= 3, "the microphone trails the reference by \(lag) samples; the air is 336")
        }
        // Two frames at a time too, lags up to a period either side: every stretch
        // within one period, and (the timelines' smoothing) nearly all within three
        // samples (measured: 336 or 337). On a loaded machine the threads can starve and
        // the speaker run dry: a stretch where the microphone heard mostly that silence
        // has nothing to align and is left out; the underruns are said.
        var close = 0, withinPeriod = 0, windows = 0
        var k = from
        func loud(_ v: [Int16]) -> Bool { v.filter { $0 != 0 }.count > v.count * 3 / 4 }
        while k + 2 <= recorder.frames {
            let xs = Array(recorder.reference[(k * 480)..<((k + 2) * 480)]), ys = Array(recorder.captured[(k * 480)..<((k + 2) * 480)])
            k += 2
            guard loud(xs) && loud(ys) else { continue }
            let l = strongestLag(xs, ys, range: (336 - 480)...(336 + 480)).lag
            if abs(l - 336) <= 3 { close += 1 }
            if abs(l - 336) < 480 { withinPeriod += 1 }
            windows += 1
        }
        #expect(windows >= 40, "\(windows) stretches with sound to align")
        let dry = speaker.underruns.load(ordering: .relaxed)
        #expect(withinPeriod == windows, "\(windows - withinPeriod) of \(windows) stretches off by a period or more (\(dry) underruns)")
        // The 3-sample precision is the timelines' smoothing and the reference's 1.5-sample
        // hysteresis on threads that run on time. Under a sanitizer the instrumented
        // threads run late (fresh-machine runs measured 41 of 50 within 2 under TSan, 32 of
        // 50 under ASan): there the test is about races, memory and the within-a-period
        // check above; the precision is printed.
        if !sanitized && ProcessInfo.processInfo.environment["TSAN_OPTIONS"] == nil {
            #expect(close >= windows * 9 / 10, "\(close) of \(windows) stretches within 3 samples (\(dry) underruns)")
        } else {
            print("DuplexTests under a sanitizer: \(close) of \(windows) stretches within 3 samples (\(dry) underruns)")
        }

        // Each playback frame's captureTime is when the speaker really played it: the
        // fake logged where every write landed in the air.
        let n = min(heard.count.load(ordering: .acquiring), speaker.writes.count)
        var within = 0
        for p in 5..<n where abs(heard.times[p] - air.time(ofIndex: speaker.writes[p])) <= 1_000_000 { within += 1 }
        #expect(n > 50 && within >= (n - 5) * 95 / 100, "\(within) of \(n - 5) playback frames stamped within 1 ms of when they were heard")
    }

    /// The speaker's share of the downlink delay is what is queued in it when a period
    /// is written: with a 200 ms buffer the playback thread still writes each period when
    /// no more than JustInTime's two (three after an underrun) are queued, where it used
    /// to block behind a full buffer and add 200 ms to every word the assistant says.
    @Test func playbackKeepsTheDeviceJustFullEnough() throws {
        let air = FakeAir()
        let speaker = FakeSpeaker(air: air, bufferFrames: 9_600, latencyFrames: 0)
        let microphone = FakeMicrophone(air: air, latencyFrames: 0, acousticDelayFrames: 0)
        let recorder = ReferenceRecorder(frames: 100)
        let capture = HookChain()
        try capture.add(recorder)
        let duplex = try DuplexAudio(configuration: DuplexConfiguration(capture: nil, playback: .discard(Self.mono48)),
                                     capturePCM: microphone, playbackPCM: speaker, captureChain: capture)
        recorder.source = duplex.reference
        let loop = try EventLoop()
        let noise = Noise()
        duplex.attach(to: loop, frameSamples: 960, uplink: { _, _ in }, downlink: { noise.fill($0, 960) })
        try duplex.start()
        try run(loop, until: recorder.done)
        duplex.stop()
        let queued = speaker.queuedAtWrite
        let dry = speaker.underruns.load(ordering: .relaxed)
        #expect(queued.count >= 80, "\(queued.count) writes")
        let most = queued.max() ?? 0
        #expect(most <= JustInTime.most * 480, "up to \(most) frames were queued in the speaker when a period was written (\(dry) underruns)")
    }

    /// Barge-in: with 200 ms queued in the speaker and some in the ring, a flush drops
    /// both at once. Nothing of the old audio is heard after the flush, the new audio
    /// plays right after it, and the reference does not claim the dropped audio played.
    @Test func flushEmptiesTheRingAndTheDevice() throws {
        let air = FakeAir()
        let speaker = FakeSpeaker(air: air, bufferFrames: 9_600, latencyFrames: 0)
        let microphone = FakeMicrophone(air: air, latencyFrames: 0, acousticDelayFrames: 0)
        let recorder = ReferenceRecorder(frames: 100)
        let capture = HookChain()
        try capture.add(recorder)
        let duplex = try DuplexAudio(configuration: DuplexConfiguration(capture: nil, playback: .discard(Self.mono48)),
                                     capturePCM: microphone, playbackPCM: speaker, captureChain: capture)
        recorder.source = duplex.reference
        let loop = try EventLoop()
        var level: Int16 = 1_000
        var deliveredAt = -1  // where the air was when the loop first handed over new audio
        duplex.attach(to: loop, frameSamples: 960, uplink: { _, _ in }) { out in
            if level == 2_000 && deliveredAt < 0 { deliveredAt = air.now }
            for i in 0..<960 { out[i] = level }
            return 960
        }
        var flushedAt = 0
        loop.schedule(after: .milliseconds(500)) {
            level = 2_000
            // The instant the flush is asked for, read before asking: the playback thread
            // may carry it out before this closure reads the air's clock again (a
            // fresh-machine ThreadSanitizer run saw the discard 118 frames before a
            // `flushedAt` read after the call).
            flushedAt = air.now
            duplex.flushPlayback()
        }
        try duplex.start()
        try run(loop, until: recorder.done)
        duplex.stop()

        #expect(duplex.playback.counters.flushes.load(ordering: .acquiring) == 1)
        let at = speaker.discardedAt.load(ordering: .acquiring)
        #expect(at >= flushedAt && at - flushedAt <= 960, "the flush happened \(at - flushedAt) frames after it was asked for")
        // The device held what was written just in time (two or three 10 ms periods of
        // its 200 ms buffer, PlaybackThread's JustInTime), and the flush dropped that too.
        let held = speaker.discarded.load(ordering: .relaxed)
        #expect(held > 0 && held <= 4 * 480, "the device held \(held) frames")
        #expect(duplex.playbackPipeline.flushedSamples.load(ordering: .relaxed) > 0, "the ring held audio too")
        // Before the flush the old audio played; from it on, never again.
        #expect((flushedAt - 9_600..<flushedAt).contains { air.samples[$0] == 1_000 })
        let after = (at..<min(at + 24_000, air.now)).map { air.samples[$0] }
        #expect(!after.contains(1_000), "old audio heard after the flush")
        // How soon the new audio plays after the flush is two waits: the loop's, until it
        // is woken to refill the ring, and the playback path's, from that refill to the
        // speaker. The first is the scheduler's (a loaded CI machine woke it 10,086
        // samples late, a fresh-machine ThreadSanitizer run 10,093), so it is printed, not
        // judged. The second is bounded by positions, not time: while the ring was empty
        // the playback thread kept the device full of silence, as it does whenever the
        // downlink pauses, so the new audio waits behind at most the device's buffer
        // (9,600 frames here, 4 periods of 10 ms on a real card), the period the thread
        // rendered before the refill, and the period between noting the air and the push.
        // Measured on a loaded machine: 6–10 samples when the loop refilled before the
        // playback thread took the flush, 10,047–10,056 when it refilled after.
        let first = after.firstIndex(of: 2_000) ?? after.count
        let new = after.filter { $0 == 2_000 }.count
        // The loop may refill before the playback thread takes the flush: audio queued
        // after the request is kept (`markFlush`), so then the wait starts at the flush.
        let queuedBehind = at + first - max(deliveredAt, at)
        print("flush: the loop refilled \(deliveredAt - at) samples after it, the new audio played \(queuedBehind) after that; \(new) of \(after.count - first) samples after that were new")
        #expect(deliveredAt >= 0 && first < after.count, "the new audio plays after the flush")
        if ProcessInfo.processInfo.environment["SANITIZER_UNDER_TEST"] == nil {
            #expect(queuedBehind <= 9_600 + 480 + 480, "the new audio waited \(queuedBehind) samples behind the device's queue")
            #expect(new * 2 > after.count - first, "the new audio plays after the flush: \(new) of \(after.count - first) samples")
        }
        // The reference never shows the dropped audio as played.
        var oldInReference = 0
        for k in 0..<recorder.frames where recorder.times[k] >= air.time(ofIndex: at) {
            for i in 0..<480 where recorder.reference[k * 480 + i] == 1_000 { oldInReference += 1 }
        }
        #expect(oldInReference == 0, "\(oldInReference) dropped samples in the reference after the flush")
    }

    /// Neither audio thread allocates, over a second of periods with built-in hooks on
    /// both sides, the reference carried, the loop topping up, and a flush half-way:
    /// the fakes count what each thread allocates between its device calls.
    @Test(.enabled(if: alloc_counter_available() != 0, "sanitizer build: the sanitizer owns malloc"))
    func audioThreadsDoNotAllocate() throws {
        let air = FakeAir()
        let playbackCount = ThreadAllocations(), captureCount = ThreadAllocations()
        let speaker = FakeSpeaker(air: air, bufferFrames: 1_920, latencyFrames: 480, allocations: playbackCount)
        let microphone = FakeMicrophone(air: air, latencyFrames: 96, acousticDelayFrames: 100, allocations: captureCount)
        let recorder = ReferenceRecorder(frames: 100)
        let capture = HookChain(), playback = HookChain()
        for h in [try HighPassFilter(cutoffHz: 80), try AutomaticGainControl(), try Limiter(ceilingDBFS: -1), LevelMeter(), recorder, MuteGate()] as [any AudioHook] {
            try capture.add(h)
        }
        try playback.add(try GainHook(gainDB: -3))
        try playback.add(LevelMeter())
        let duplex = try DuplexAudio(configuration: DuplexConfiguration(capture: nil, playback: .discard(Self.mono48)),
                                     capturePCM: microphone, playbackPCM: speaker, captureChain: capture, playbackChain: playback)
        recorder.source = duplex.reference
        let loop = try EventLoop()
        let noise = Noise()
        var frames = 0
        duplex.attach(to: loop, frameSamples: 960, uplink: { _, _ in frames += 1 }, downlink: { noise.fill($0, 960) })
        loop.schedule(after: .milliseconds(500)) { duplex.flushPlayback() }
        try duplex.start()
        try run(loop, until: recorder.done)
        duplex.stop()
        #expect(duplex.playback.counters.flushes.load(ordering: .relaxed) == 1)
        #expect(playbackCount.periods.load(ordering: .relaxed) > 60 && captureCount.periods.load(ordering: .relaxed) > 60)
        #expect(frames > 30)
        #expect(playbackCount.counted.load(ordering: .relaxed) == 0, "playback thread allocations")
        #expect(captureCount.counted.load(ordering: .relaxed) == 0, "capture thread allocations")
    }

    /// The file sink runs on its own clock: each frame is stamped with the moment its
    /// period is due, 10 ms apart, and the playout pull follows it.
    @Test func fileSinkStampsFramesOnItsOwnClock() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("linnet-duplex-\(getpid()).wav").path
        defer { unlink(path) }
        let heard = HeardTimes(capacity: 40)
        let playback = HookChain()
        try playback.add(heard)
        let duplex = try DuplexAudio(DuplexConfiguration(capture: nil, playback: .file(path, format: Self.mono48, paced: true)),
                                     playbackChain: playback)
        let loop = try EventLoop()
        var pulls = 0
        duplex.attach(to: loop, frameSamples: 960, uplink: nil) { out in
            pulls += 1
            for i in 0..<960 { out[i] = 500 }
            return 960
        }
        let done = try EventFD()
        loop.schedule(after: .milliseconds(250)) { done.signal() }
        let started = MonotonicClock.now().nanoseconds
        try duplex.start()
        try run(loop, until: done)
        try duplex.finish()
        let n = heard.count.load(ordering: .acquiring)
        #expect(n >= 10)
        for k in 1..<n { #expect(heard.times[k] - heard.times[k - 1] == 10_000_000) }
        #expect(heard.times[0] >= started)
        // Pulled as consumed: about one 20 ms frame per two periods, after the priming.
        #expect(pulls >= n / 2 && pulls <= n / 2 + 4, "\(pulls) pulls for \(n) periods")
        #expect(duplex.playback.fileFailure == nil)
    }

    /// ALSA's own drop + prepare on the `null` device: the calls the flush makes.
    @Test func nullDeviceDropsAndPreparesAgain() throws {
        let pcm = try PCM(device: "null", stream: .playback, rate: 48_000, channels: 1)
        let out = [Int16](repeating: 0, count: 960)
        _ = try out.withBuffer { (b: UnsafeBufferPointer<Int16>) throws(ALSAError) in try pcm.write(b) }
        #expect(pcm.discardPending() == 0)
        #expect(try out.withBuffer { (b: UnsafeBufferPointer<Int16>) throws(ALSAError) in try pcm.write(b) } == 960)
        #expect(pcm.delayFrames() != nil)
    }
}

@Suite struct PlaybackTimeTests {
    /// A 20 ms period rendered to be heard at T: its two 10 ms frames reach the
    /// playback hooks stamped T and T + 10 ms (before: always zero), and the reference
    /// gets them with the same times.
    @Test func playbackFramesCarryWhenTheyAreHeard() throws {
        let heard = HeardTimes(capacity: 8)
        let chain = HookChain()
        try chain.add(heard)
        let reference = try PlaybackReference(format: try AudioFormat(sampleRate: .hz48000, channels: 1), slots: 8)
        let pipeline = try PlaybackPipeline(rate: .hz48000, deviceRate: 48_000, maxPeriodFrames: 960, chain: chain, reference: reference)
        let device = DeviceFormat(sampleFormat: .s16LE, sampleRate: 48_000, channels: 1, periodFrames: 960)
        pipeline.playbackStarted(device)
        let tone = toneSamples(960)
        _ = tone.withUnsafeBufferPointer { pipeline.ring.push($0) }
        var out = [Int16](repeating: 0, count: 960)
        let t = Instant(nanoseconds: 5_000_000_000)
        _ = out.withUnsafeMutableBytes { pipeline.render(into: $0, frames: 960, format: device, time: t) }
        #expect(heard.count.load(ordering: .relaxed) == 2)
        #expect(heard.times[0] == 5_000_000_000 && heard.times[1] == 5_010_000_000)
        // The capture side, 3 ms into the period, finds the tone from sample 144 on.
        reference.align(to: t + .milliseconds(3))
        #expect(reference.coverage == 480)
        #expect(Array(reference.samples) == Array(tone[144..<624]))
    }
}
