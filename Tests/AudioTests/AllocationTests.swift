import CAllocCounter
import Foundation
import Testing
import Wire
@testable import Audio

@Suite struct AllocationTests {
    /// Skipped in sanitizer builds (scripts/sanitize.sh), where the counter is compiled
    /// out; the capture-path test below then still runs the path under the sanitizer,
    /// with nothing counted.
    @Test(.enabled(if: alloc_counter_available() != 0, "sanitizer build: the sanitizer owns malloc"))
    func counterSeesAllocations() {
        alloc_counter_begin()
        let a = [Int](repeating: 1, count: 1000)
        let n = alloc_counter_end()
        #expect(a.count == 1000)
        #expect(n >= 1)
    }

    /// The capture path end to end — S32_LE stereo 44.1 kHz bytes → average to mono →
    /// resample to 48 kHz → hook chain with every built-in hook (echo canceller and
    /// speexdsp preprocessor too) and a deferred hook →
    /// mute gate → sample ring and frame ring — makes no allocation on the capture thread
    /// over 3000 frames, while the chain is edited between frames (edits allocate, on the
    /// control side, outside the counted region) and the deferred consumer runs.
    @Test func capturePathDoesNotAllocate() throws {
        let converter = try InputConverter(format: .s32LE, channels: 2, mix: .average)
        let resampler = try Resampler(inputRate: 44100, outputRate: .hz48000)
        let chain = HookChain()
        let hpf = try HighPassFilter(cutoffHz: 40)
        let gain = try GainHook(gainDB: 3)
        let agc = try AutomaticGainControl()
        let gate = try NoiseGate(thresholdDBFS: -60)
        let limiter = try Limiter(ceilingDBFS: -1, lookahead: true)
        let meter = LevelMeter()
        let deferred = try DeferredHook(deadlineFrames: 2)
        let mute = MuteGate()
        // The echo canceller (reference: the previous frame) and the preprocessor.
        let reference = StagedReference()
        let aec = try EchoCanceller(rate: .hz48000, reference: reference)
        let ns = try SpeexPreprocessor(rate: .hz48000, noiseSuppressDB: 15)
        for h in [aec, ns, hpf, gain, agc, gate, limiter, meter, deferred, mute] as [any AudioHook] { try chain.add(h) }
        let ring = try SampleRing(capacity: 4096)
        let frameRing = try FrameRing(slotCount: 16, slotSamples: 480)

        // 3 s of a 440 Hz tone with noise, as device bytes, 10 ms per period.
        var rng = SeededRandom(seed: 8)
        var bytes = [UInt8](repeating: 0, count: 441 * 2 * 4 * 100)
        for i in 0..<(441 * 100) {
            let s = Int32(sin(2 * Double.pi * 440 * Double(i) / 44100) * 3e8) &+ Int32.random(in: -1 << 24...1 << 24, using: &rng)
            for c in 0..<2 { withUnsafeBytes(of: s.littleEndian) { for k in 0..<4 { bytes[(i * 2 + c) * 4 + k] = $0[k] } } }
        }
        var mono = [Int16](repeating: 0, count: 441)
        var frame = [Int16](repeating: 0, count: 960)
        var drain = [Int16](repeating: 0, count: 960)
        var consumer = [Int16](repeating: 0, count: 960)
        var allocations = 0
        chain.start(.standard)
        for seq in 0..<3200 {
            // Control side (not counted): occasional edits and reclaim.
            if seq % 97 == 0 { try chain.move(meter, to: seq % 8) }
            if seq % 211 == 0 { try chain.setEnabled(gate, seq % 2 == 0) }
            if seq % 500 == 0 { mute.setMuted(seq % 1000 == 0) }
            if seq % 300 == 0 { try gain.setGain(dB: Double(seq % 7)) }
            chain.reclaim()

            let counting = seq >= 200 // warm-up: first calls may resolve metadata lazily
            if counting { alloc_counter_begin() }
            let period = seq % 100
            let produced: Int = try bytes.withBytes { raw throws(AudioError) in
                let chunk = UnsafeRawBufferPointer(rebasing: raw[(period * 441 * 8)..<((period + 1) * 441 * 8)])
                let n = try mono.withMutableBuffer { dst throws(AudioError) in try converter.convert(chunk, into: dst) }
                return try mono.withBuffer { src throws(AudioError) in
                    try frame.withMutableBuffer { dst throws(AudioError) in try resampler.process(UnsafeBufferPointer(rebasing: src[0..<n]), into: dst) }
                }
            }
            let info = frameInfo(seq: UInt64(seq))
            frame.withUnsafeMutableBufferPointer { f in
                let f480 = UnsafeMutableBufferPointer(rebasing: f[0..<produced])
                _ = chain.process(f480, info)
                reference.stage(UnsafeBufferPointer(f480))
                _ = ring.push(UnsafeBufferPointer(f480))
                _ = frameRing.push(UnsafeBufferPointer(f480), info: info)
            }
            _ = drain.withUnsafeMutableBufferPointer { ring.pop(into: $0) }
            _ = drain.withUnsafeMutableBufferPointer { frameRing.pop(into: $0) }
            // The deferred consumer (normally another thread) puts frames straight back.
            consumer.withUnsafeMutableBufferPointer { c in
                while let got = deferred.receive(into: c) {
                    _ = deferred.putBack(UnsafeBufferPointer(rebasing: c[0..<got.sampleCount]), got)
                }
            }
            if counting { allocations += alloc_counter_end() }
            #expect(produced == 480)
        }
        chain.stop()
        #expect(allocations == 0)
        #expect(deferred.counters.putBack > 2900)
        #expect(meter.frameCount == 3200)
    }
}
