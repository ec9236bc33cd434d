import Testing
import Foundation
import Synchronization
import CAllocCounter
import Wire
import Audio
import Platform
@testable import Devices

/// A capture hook that keeps what it was given and the reference it found beside it,
/// frame by frame, in preallocated storage, up to `frames` of them (`count` so far).
final class ReferenceRecorder: AudioHook, @unchecked Sendable {
    let frames: Int
    let samplesPerFrame: Int
    let captured: UnsafeMutableBufferPointer<Int16>
    let reference: UnsafeMutableBufferPointer<Int16>
    let coverage: UnsafeMutableBufferPointer<Int>
    let times: UnsafeMutableBufferPointer<Int64>
    let count = Atomic<Int>(0)
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

/// Starts `duplex`, runs its threads (`threads` of them) and `loop` on `clock` until
/// `done`, then lets the threads go and stops them. What the test measures it reads
/// after this returns, when the threads are stopped, or (what they go on doing while
/// they see they are stopped) in `done`, when they all wait.
func run(_ duplex: DuplexAudio, on clock: VirtualClock, threads: Int = 2, loop: EventLoop, until done: () -> Bool) throws {
    try duplex.start()
    defer {
        clock.release()
        duplex.stop()
    }
    try clock.run(threads: threads, loop: loop, until: done)
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
                                     capturePCM: microphone, playbackPCM: speaker, captureChain: capture, playbackChain: playback,
                                     clock: air.clock.device)
        recorder.source = duplex.reference
        let loop = try EventLoop()
        let noise = Noise()
        duplex.attach(to: loop, frameSamples: 960, uplink: { _, _ in }, downlink: { noise.fill($0, 960) })
        try run(duplex, on: air.clock, loop: loop) { recorder.count.load(ordering: .acquiring) == recorder.frames }

        // On virtual time the threads are never late and the speaker never runs dry, so
        // the timelines follow the devices exactly. After the first 20 frames (the
        // speaker filling up) every frame had a whole reference, to the sample.
        let from = 20
        let dry = speaker.underruns.load(ordering: .relaxed)
        #expect(dry == 0, "the speaker ran dry \(dry) times")
        let short = (from..<recorder.frames).filter { recorder.coverage[$0] != 480 }.map { "\($0):\(recorder.coverage[$0])" }
        #expect(short.isEmpty, "frame:samples of reference short of a whole frame: \(short)")
        let x = Array(recorder.reference[(from * 480)..<(from * 480 + 24_000)])
        let y = Array(recorder.captured[(from * 480)..<(from * 480 + 24_000)])
        let (lag, _) = strongestLag(x, y, range: -960...960)
        // Exactly the air: the reference keeps its sub-sample phase with 1.5 samples of
        // hysteresis (PlaybackReference.steadyOffset: the canceller needs it steady more
        // than exact), and with devices whose delays never jitter that phase is zero.
        #expect(lag == 336, "the microphone trails the reference by \(lag) samples; the air is 336")
        // Two frames at a time too, lags up to a period either side: every stretch has
        // sound, and every one is aligned to the sample (the timelines never drift).
        var lags: [Int] = []
        var k = from
        func loud(_ v: [Int16]) -> Bool { v.filter { $0 != 0 }.count > v.count * 3 / 4 }
        while k + 2 <= recorder.frames {
            let xs = Array(recorder.reference[(k * 480)..<((k + 2) * 480)]), ys = Array(recorder.captured[(k * 480)..<((k + 2) * 480)])
            k += 2
            #expect(loud(xs) && loud(ys), "stretch at frame \(k - 2) is silent")
            lags.append(strongestLag(xs, ys, range: (336 - 480)...(336 + 480)).lag)
        }
        #expect(lags.count == (recorder.frames - from) / 2)
        #expect(lags.allSatisfy { $0 == 336 }, "lags of the two-frame stretches: \(lags)")

        // Each playback frame's captureTime is when the speaker really played it, to the
        // nanosecond, from the first: the fake logged where every write landed in the air.
        let n = min(heard.count.load(ordering: .acquiring), speaker.writes.count)
        let off = (0..<n).filter { heard.times[$0] != air.time(ofIndex: speaker.writes[$0]) }
            .map { "\($0):\(heard.times[$0] - air.time(ofIndex: speaker.writes[$0]))ns" }
        #expect(n > 50 && off.isEmpty, "of \(n) playback frames, stamped off when they were heard: \(off)")
    }

    /// The speaker's share of the downlink delay is what is queued in it when a period
    /// is written: with a 200 ms buffer the playback thread still writes each period when
    /// no more than JustInTime's period and a half (up to three after underruns) is queued, where it used
    /// to block behind a full buffer and add 200 ms to every word the assistant says.
    @Test func playbackKeepsTheDeviceJustFullEnough() throws {
        let air = FakeAir()
        let speaker = FakeSpeaker(air: air, bufferFrames: 9_600, latencyFrames: 0)
        let microphone = FakeMicrophone(air: air, latencyFrames: 0, acousticDelayFrames: 0)
        let recorder = ReferenceRecorder(frames: 100)
        let capture = HookChain()
        try capture.add(recorder)
        let duplex = try DuplexAudio(configuration: DuplexConfiguration(capture: nil, playback: .discard(Self.mono48)),
                                     capturePCM: microphone, playbackPCM: speaker, captureChain: capture,
                                     clock: air.clock.device)
        recorder.source = duplex.reference
        let loop = try EventLoop()
        let noise = Noise()
        duplex.attach(to: loop, frameSamples: 960, uplink: { _, _ in }, downlink: { noise.fill($0, 960) })
        try run(duplex, on: air.clock, loop: loop) { recorder.count.load(ordering: .acquiring) == recorder.frames }
        let queued = speaker.queuedAtWrite
        let dry = speaker.underruns.load(ordering: .relaxed)
        #expect(queued.count >= 80, "\(queued.count) writes")
        // On virtual time the thread is never late, so the speaker never runs dry and
        // the fill stays at JustInTime's least: a period and a half, exactly, once it is reached.
        #expect(dry == 0, "the speaker ran dry \(dry) times")
        let most = queued.max() ?? 0
        #expect(most == JustInTime.least * 240, "up to \(most) frames were queued in the speaker when a period was written")
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
                                     capturePCM: microphone, playbackPCM: speaker, captureChain: capture,
                                     clock: air.clock.device)
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
        air.clock.schedule(after: .milliseconds(500)) {
            level = 2_000
            // The instant the flush is asked for (the threads all wait meanwhile).
            flushedAt = air.now
            duplex.flushPlayback()
        }
        try run(duplex, on: air.clock, loop: loop) { recorder.count.load(ordering: .acquiring) == recorder.frames }

        #expect(duplex.playback.counters.flushes.load(ordering: .acquiring) == 1)
        let at = speaker.discardedAt.load(ordering: .acquiring)
        // At the top of the thread's next period, as PlaybackThread promises: within one.
        #expect(at >= flushedAt && at - flushedAt <= 480, "the flush happened \(at - flushedAt) frames after it was asked for")
        // The device held what was written just in time (15 ms, a period and a half of its 200 ms
        // buffer, PlaybackThread's JustInTime, which never ran dry here), and the flush
        // dropped that too.
        #expect(speaker.underruns.load(ordering: .relaxed) == 0)
        let held = speaker.discarded.load(ordering: .relaxed)
        #expect(held == JustInTime.least * 240, "the device held \(held) frames")
        #expect(duplex.playbackPipeline.flushedSamples.load(ordering: .relaxed) > 0, "the ring held audio too")
        // Before the flush the old audio played; from it on, never again.
        #expect((flushedAt - 9_600..<flushedAt).contains { air.samples[$0] == 1_000 })
        let after = (at..<min(at + 24_000, air.now)).map { air.samples[$0] }
        #expect(!after.contains(1_000), "old audio heard after the flush")
        // How soon the new audio plays after the flush is two waits: the loop's, until it
        // is woken to refill the ring, and the playback path's, from that refill to the
        // speaker. On virtual time the loop takes no time to react, so the first says
        // whether the thread asked for the refill at once: the loop refills at the very
        // instant of the flush. The second is bounded by positions: while the ring was
        // empty the playback thread kept the device just full (JustInTime) of silence, as
        // it does whenever the downlink pauses, so the new audio waits behind at most
        // that and the period the thread rendered before the refill.
        let first = after.firstIndex(of: 2_000) ?? after.count
        let new = after.filter { $0 == 2_000 }.count
        // Had the loop refilled before the playback thread took the flush, audio queued
        // after the request is kept (`markFlush`), and the wait would start at the flush.
        let queuedBehind = at + first - max(deliveredAt, at)
        print("flush: the loop refilled \(deliveredAt - at) samples after it, the new audio played \(queuedBehind) after that; \(new) of \(after.count - first) samples after that were new")
        #expect(deliveredAt == at, "the loop refilled \(deliveredAt - at) samples after the flush")
        #expect(first < after.count, "the new audio plays after the flush")
        #expect(queuedBehind <= JustInTime.most * 240 + 480, "the new audio waited \(queuedBehind) samples behind the device's queue")
        // And from then on only the new audio: the ring never ran dry.
        #expect(new == after.count - first, "the new audio plays after the flush: \(new) of \(after.count - first) samples")
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
                                     capturePCM: microphone, playbackPCM: speaker, captureChain: capture, playbackChain: playback,
                                     clock: air.clock.device)
        recorder.source = duplex.reference
        let loop = try EventLoop()
        let noise = Noise()
        var frames = 0
        duplex.attach(to: loop, frameSamples: 960, uplink: { _, _ in frames += 1 }, downlink: { noise.fill($0, 960) })
        air.clock.schedule(after: .milliseconds(500)) { duplex.flushPlayback() }
        try run(duplex, on: air.clock, loop: loop) { recorder.count.load(ordering: .acquiring) == recorder.frames }
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
        let clock = VirtualClock()
        let duplex = try DuplexAudio(configuration: DuplexConfiguration(capture: nil, playback: .file(path, format: Self.mono48, paced: true)),
                                     capturePCM: nil, playbackPCM: nil, playbackChain: playback, clock: clock.device)
        let loop = try EventLoop()
        var pulls = 0
        duplex.attach(to: loop, frameSamples: 960, uplink: nil) { out in
            pulls += 1
            for i in 0..<960 { out[i] = 500 }
            return 960
        }
        var done = false
        clock.schedule(after: .milliseconds(250)) { done = true }
        let started = clock.nanoseconds
        try duplex.start()
        // Read while the thread waits for its next period: once let go to stop, it may
        // go on for a period or two.
        var n = 0
        do {
            defer { clock.release() }
            try clock.run(threads: 1, loop: loop) {
                n = heard.count.load(ordering: .acquiring)
                return done
            }
        }
        try duplex.finish()
        // A period every 10 ms of the 250, the first due one period after the start.
        #expect(n == 25)
        for k in 0..<n { #expect(heard.times[k] == started + Int64(k + 1) * 10_000_000, "period \(k)") }
        // Pulled as consumed: what was played plus the ring's target (30 ms), in 20 ms
        // frames (one per two periods, after the priming).
        #expect(pulls == (n * 480 + 1_440 + 959) / 960, "\(pulls) pulls for \(n) periods")
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
