import Testing
import CAllocCounter
import Wire
@testable import Audio

@Suite struct PlaybackReferenceTests {
    static let format = try! AudioFormat(sampleRate: .hz48000, channels: 1)

    /// A stream of numbered samples played in 10 ms frames from `start`.
    func play(_ reference: PlaybackReference, frames: Range<Int>, start: Int64, first: Int = 0) {
        for k in frames {
            let frame = (0..<480).map { Int16(truncatingIfNeeded: first + k * 480 + $0) }
            frame.withUnsafeBufferPointer { reference.played($0, at: Instant(nanoseconds: start + Int64(k) * 10_000_000)) }
        }
    }

    /// Capture frames that start anywhere relative to the playback frames get exactly
    /// the samples heard from their first instant on, to the nearest sample.
    @Test func capturedFramesGetWhatWasPlayingThen() throws {
        let reference = try PlaybackReference(format: Self.format, slots: 16)
        let start: Int64 = 1_000_000_000
        play(reference, frames: 0..<6, start: start)
        // 3.3 ms in: sample 158.4 → 158.
        for (k, offsetNs) in [(0, 3_300_000), (1, 3_300_000), (2, 0), (3, 9_999_000)] as [(Int, Int64)] {
            reference.align(to: Instant(nanoseconds: start + Int64(k) * 10_000_000 + offsetNs))
            let first = k * 480 + Int((offsetNs * 48_000 + 500_000_000) / 1_000_000_000)
            #expect(reference.coverage == 480)
            #expect(Array(reference.samples) == (first..<(first + 480)).map { Int16(truncatingIfNeeded: $0) })
        }
        // Past the end of what was played: the rest is silence, and says so.
        reference.align(to: Instant(nanoseconds: start + 55_000_000))
        #expect(reference.coverage == 240)
        #expect(Array(reference.samples[0..<240]) == (2640..<2880).map { Int16(truncatingIfNeeded: $0) })
        #expect(reference.samples[240...].allSatisfy { $0 == 0 })
        // Nothing playing at all.
        reference.align(to: Instant(nanoseconds: start + 200_000_000))
        #expect(reference.coverage == 0 && reference.samples.allSatisfy { $0 == 0 })
    }

    /// A flush at T: what the old generation said about T on never played; what is
    /// played after the flush is, even where it is due before the old audio would
    /// have been.
    @Test func flushedAudioIsNotInTheReference() throws {
        let reference = try PlaybackReference(format: Self.format, slots: 16)
        let start: Int64 = 2_000_000_000
        // 60 ms queued ahead of the speaker, then dropped 25 ms in.
        play(reference, frames: 0..<6, start: start)
        let cut = start + 25_000_000
        reference.flushed(at: Instant(nanoseconds: cut))
        // The new audio starts 2 ms after the flush, numbered from 100 000.
        play(reference, frames: 0..<3, start: cut + 2_000_000, first: 100_000)
        reference.align(to: Instant(nanoseconds: start + 20_000_000))
        // 20–25 ms: old audio that did play; 25–27 ms: nothing; 27–30 ms: the new.
        let r = Array(reference.samples)
        #expect(r[0..<240] == ArraySlice((960..<1_200).map { Int16(truncatingIfNeeded: $0) }))
        #expect(r[240..<336].allSatisfy { $0 == 0 })
        #expect(r[336..<480] == ArraySlice((100_000..<100_144).map { Int16(truncatingIfNeeded: $0) }))
        #expect(reference.coverage == 240 + 144)
        reference.align(to: Instant(nanoseconds: start + 30_000_000))
        #expect(Array(reference.samples) == (100_144..<100_624).map { Int16(truncatingIfNeeded: $0) })
    }

    /// A full ring drops (and counts) rather than overwriting what the consumer reads.
    @Test func aFullRingDropsNewFrames() throws {
        let reference = try PlaybackReference(format: Self.format, slots: 4)
        play(reference, frames: 0..<6, start: 0)
        #expect(reference.overflows.load(ordering: .relaxed) == 2)
        reference.align(to: Instant(nanoseconds: 30_000_000))
        #expect(Array(reference.samples) == (1440..<1920).map { Int16(truncatingIfNeeded: $0) })
        #expect(throws: AudioError.capacityNotPowerOfTwo(6)) { try PlaybackReference(format: Self.format, slots: 6) }
    }

    @Test(.enabled(if: alloc_counter_available() != 0, "sanitizer build: the sanitizer owns malloc"))
    func neitherSideAllocates() throws {
        let reference = try PlaybackReference(format: Self.format, slots: 16)
        let frame = [Int16](repeating: 7, count: 480)
        var allocations = 0
        frame.withUnsafeBufferPointer { f in
            for k in 0..<2_000 {
                let counting = k >= 10
                if counting { alloc_counter_begin() }
                reference.played(f, at: Instant(nanoseconds: Int64(k) * 10_000_000))
                if k % 500 == 0 { reference.flushed(at: Instant(nanoseconds: Int64(k) * 10_000_000 + 5_000_000)) }
                reference.align(to: Instant(nanoseconds: Int64(k) * 10_000_000 - 3_000_000))
                if counting { allocations += alloc_counter_end() }
            }
        }
        #expect(allocations == 0)
    }
}

@Suite struct FrameTimelineTests {
    /// Measurements that jitter by ±1 ms around a steady 10 ms period come out as a
    /// steady 10 ms period, within 0.1 ms of the truth once settled.
    @Test func jitteredMeasurementsComeOutSteady() {
        var timeline = FrameTimeline(sampleRate: 48_000)
        var rng = SeededRandom(seed: 3)
        var worst: Int64 = 0
        for k in 0..<500 {
            let truth: Int64 = 1_000_000_000 + Int64(k) * 10_000_000
            let jitter = Int64(rng.next() % 2_000_001) - 1_000_000
            let t = timeline.time(measured: Instant(nanoseconds: truth + jitter), frames: 480).nanoseconds
            if k > 100 { worst = max(worst, abs(t - truth)) }
        }
        #expect(worst < 300_000, "worst error after settling \(worst) ns")
        #expect(timeline.reanchors == 0)
    }

    /// A measurement taken by a thread pre-empted half-way (not trusted) is not
    /// followed, however far off it is; the next trusted one is.
    @Test func untrustedMeasurementsAreNotFollowed() {
        var timeline = FrameTimeline(sampleRate: 48_000)
        _ = timeline.time(measured: Instant(nanoseconds: 0), frames: 480)
        #expect(timeline.time(measured: Instant(nanoseconds: 19_000_000), frames: 480, trusted: false).nanoseconds == 10_000_000)
        #expect(timeline.time(measured: Instant(nanoseconds: 20_000_000), frames: 480).nanoseconds == 20_000_000)
        #expect(timeline.reanchors == 0)
    }

    /// A device clock 100 ppm fast against the monotonic one is followed, not left to
    /// drift away; a jump (an xrun) is taken at once.
    @Test func driftIsFollowedAndJumpsReanchor() {
        var timeline = FrameTimeline(sampleRate: 48_000)
        var last: Int64 = 0
        for k in 0..<6_000 {
            // 480 device frames last 9.999 ms of monotonic time.
            let truth = 1_000_000_000 + Int64(k) * 9_999_000
            last = timeline.time(measured: Instant(nanoseconds: truth), frames: 480).nanoseconds - truth
        }
        #expect(abs(last) < 100_000, "off by \(last) ns after a minute")
        let t = timeline.time(measured: Instant(nanoseconds: 200_000_000_000), frames: 480)
        #expect(t.nanoseconds == 200_000_000_000)
        #expect(timeline.reanchors == 1)
    }
}

@Suite struct RingDiscardTests {
    /// A flush drops what was queued before the producer's mark and keeps what came after.
    @Test func discardStopsAtTheMark() throws {
        let ring = try SampleRing(capacity: 64)
        _ = [Int16](repeating: 1, count: 20).withUnsafeBufferPointer { ring.push($0) }
        let mark = ring.writePosition
        _ = [Int16](repeating: 2, count: 10).withUnsafeBufferPointer { ring.push($0) }
        #expect(ring.discard(upTo: mark) == 20)
        var out = [Int16](repeating: 0, count: 64)
        #expect(out.withUnsafeMutableBufferPointer { ring.pop(into: $0) } == 10)
        #expect(out[0..<10].allSatisfy { $0 == 2 })
        // A mark already consumed past drops nothing; no mark drops all.
        _ = [Int16](repeating: 3, count: 5).withUnsafeBufferPointer { ring.push($0) }
        #expect(ring.discard(upTo: mark) == 0)
        #expect(ring.discard() == 5 && ring.availableToRead == 0)
    }
}
