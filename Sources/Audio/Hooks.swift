import Synchronization
import Wire

// Built-in hooks. Each keeps its hot state behind an `UnsafeMutablePointer` (no
// exclusivity checks, no ARC on the audio thread) and computes its coefficients at
// configuration time, for every pipeline rate at once, so `process` only selects.
// Frames are 10 ms, so per-frame time constants do not depend on the rate.

/// log2 of a mean square in Q16 for a level in dBFS (0 dBFS = full-scale square wave,
/// mean square 2^30): log2 ms = dB / (10·log10 2) + 30.
func meanSquareLog2Q16(dBFS: Double) -> Int32 {
    Int32(saturating: (dBFS / (10 * ConfigMath.log10(2)) + 30) * 65536)
}

/// log2 of an amplitude ratio in Q16 for a gain in dB.
func amplitudeLog2Q16(dB: Double) -> Int32 {
    Int32(saturating: (dB / (20 * ConfigMath.log10(2)) * 65536).rounded())
}

/// A per-frame one-pole coefficient in Q15 for a time constant in milliseconds.
func onePoleQ15(milliseconds: Double) -> Int32 {
    Int32(saturating: (ConfigMath.onePole(tauMilliseconds: milliseconds, frameMilliseconds: 10) * 32768).rounded())
}

// MARK: - DC removal / high-pass

/// Per-rate configuration of the DC remover: block length and the per-block update.
struct DCRemoverDesign {
    /// Samples per channel in a block: a power of two, 1…16.
    var blockLength: Int
    var log2Block: Int
    /// 1 − p^B in Q30: the fraction of the gap to the block mean the estimate closes.
    var kQ30: Int64
}

/// DC removal / high-pass: the output is the input minus a running DC estimate, a
/// first-order low-pass with the pole p = (1 − tan(πfc/fs))/(1 + tan(πfc/fs)), so the
/// whole is the bilinear-transform first-order high-pass (−3 dB at the cutoff).
///
/// Why blocks: a per-sample recursion cannot be vectorised and cost ~20 instructions a
/// sample (9,600 per 48 kHz frame). Here the estimate is updated once per block of B
/// samples from the block's (trapezoidal) mean with the block pole p^B, so it follows
/// the same exponential at block instants; within a block it is interpolated linearly
/// from the previous block's value, so the subtracted signal has no steps, and the
/// subtraction is one vectorised pass. For B = 1 this is exactly the bilinear filter.
/// For B > 1 the block mean sees frequencies above the block rate and the interpolation
/// adds small products of them: B is the largest power of two ≤ 16 that keeps the block
/// rate fs/B at least 150 times the cutoff, which keeps those products 45 dB or more
/// below a tone anywhere in the band and the response within 0.01 dB of the bilinear
/// filter's (the tests measure both). Default 20 Hz at 48 kHz: B = 16, 30 blocks a
/// frame; cutoffs above 187 Hz (48 kHz) run per sample.
///
/// Fixed point: the estimate is Q14 in 32 bits (|mean| ≤ 2^15 → ≤ 2^29); the block
/// update (μ − d)·k is one 64-bit multiply per block, its result rounded to a multiple
/// of B so the in-block ramp d + step·(i+1) ends exactly on the new estimate.
public final class HighPassFilter: AudioHook, @unchecked Sendable {
    public let cutoffHz: Double
    /// Per pipeline rate (16, 24, 48 kHz).
    private let designs: UnsafeMutablePointer<DCRemoverDesign>
    /// Per channel: the DC estimate, Q14, and the previous block's last sample.
    private let dcQ14: UnsafeMutablePointer<Int32>
    private let lastSample: UnsafeMutablePointer<Int32>
    /// removeDC4's block means and steps (allocated here, not on the audio thread).
    private let scratch: UnsafeMutablePointer<Int32>
    /// removeDC4's sample weights in a block mean, 2, 2, 2, 1 repeated over a chunk.
    private let weights: UnsafeMutablePointer<Int16>
    /// removeDC4's per-sample subtrahends for a chunk.
    private let ramp: UnsafeMutablePointer<Int16>

    /// - cutoffHz: 1…1000 Hz (default 20 Hz: DC and subsonic rumble).
    public init(cutoffHz: Double = 20) throws(AudioError) {
        try checkRange(.cutoffHz, cutoffHz, 1, 1000)
        self.cutoffHz = cutoffHz
        designs = .allocate(capacity: 3)
        for rate in SampleRate.allCases {
            let fs = Double(rate.hertz)
            let b = HighPassFilter.blockLength(cutoffHz: cutoffHz, sampleRate: fs)
            var lg = 0
            while (1 << lg) < b { lg += 1 }
            let p = HighPassFilter.pole(cutoffHz: cutoffHz, sampleRate: fs)
            var pB = 1.0
            for _ in 0..<b { pB *= p }
            (designs + rate.index).initialize(to: DCRemoverDesign(blockLength: b, log2Block: lg,
                                                                  kQ30: Int64(saturating: ((1 - pB) * 1073741824).rounded())))
        }
        dcQ14 = .allocate(capacity: AudioFormat.maxChannels)
        dcQ14.initialize(repeating: 0, count: AudioFormat.maxChannels)
        lastSample = .allocate(capacity: AudioFormat.maxChannels)
        lastSample.initialize(repeating: 0, count: AudioFormat.maxChannels)
        scratch = .allocate(capacity: dc4ScratchCount)
        scratch.initialize(repeating: 0, count: dc4ScratchCount)
        weights = .allocate(capacity: 4 * dc4ChunkBlocks)
        for i in 0..<(4 * dc4ChunkBlocks) { (weights + i).initialize(to: i % 4 == 3 ? 1 : 2) }
        ramp = .allocate(capacity: 4 * dc4ChunkBlocks)
        ramp.initialize(repeating: 0, count: 4 * dc4ChunkBlocks)
    }

    deinit {
        designs.deallocate()
        dcQ14.deallocate()
        lastSample.deallocate()
        scratch.deallocate()
        weights.deallocate()
        ramp.deallocate()
    }

    /// The pole p of the DC estimate (per sample), for reference implementations.
    public static func pole(cutoffHz: Double, sampleRate: Double) -> Double {
        let t = ConfigMath.tan(ConfigMath.pi * cutoffHz / sampleRate)
        return (1 - t) / (1 + t)
    }

    /// Samples per channel in a block: the largest power of two ≤ 16 with
    /// sampleRate/B ≥ 150·cutoff (and ≥ 1); every frame length (160, 240, 480) divides.
    public static func blockLength(cutoffHz: Double, sampleRate: Double) -> Int {
        var b = 16
        while b > 1 && sampleRate / Double(b) < 150 * cutoffHz { b /= 2 }
        return b
    }

    /// The block length in use at `rate`.
    public func blockLength(at rate: SampleRate) -> Int { designs[rate.index].blockLength }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        for c in 0..<AudioFormat.maxChannels {
            dcQ14[c] = 0
            lastSample[c] = 0
        }
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        guard let base = samples.baseAddress else { return .pass }
        let design = designs[info.sampleRate.index]
        let channels = info.channels
        let frames = min(info.sampleCount, samples.count) / channels
        let blocks = frames &>> design.log2Block
        if channels == 1 && design.blockLength >= 4 {
            // Mono with a constant block length and unit stride, so LLVM unrolls and
            // vectorises both inner loops: B = 16 for cutoffs ≤ 20 Hz at 48 kHz, B = 4
            // for the product's default 80 Hz (`high-pass-hz`), which through the
            // general strided loop below costs ~17,800 instructions a frame.
            switch design.log2Block {
            case 4:
                removeDC(base, blocks: blocks, blockLength: 16, log2Block: 4, stride: 1,
                         kQ30: design.kQ30, dc: dcQ14, last: lastSample)
            case 3:
                removeDC(base, blocks: blocks, blockLength: 8, log2Block: 3, stride: 1,
                         kQ30: design.kQ30, dc: dcQ14, last: lastSample)
            default:
                if hasLevelCache(info) {
                    // In a chain: the output's peak is tracked in the output pass,
                    // and peak and energy handed on, so the limiter and meter after it
                    // measure nothing.
                    var (hi, lo) = removeDC4(base, blocks: blocks, kQ30: design.kQ30, dc: dcQ14, last: lastSample,
                                             scratch: scratch, weights: weights, ramp: ramp, measure: true)
                    let frame = UnsafeMutableBufferPointer(start: base, count: frames)
                    for i in (blocks &<< 2)..<frames { // the samples after the last whole block
                        hi = max(hi, base[i])
                        lo = min(lo, base[i])
                    }
                    publishLevels(info, peak: max(Int32(hi), 0 &- Int32(lo)), energy: energy(frame))
                } else {
                    _ = removeDC4(base, blocks: blocks, kQ30: design.kQ30, dc: dcQ14, last: lastSample,
                                  scratch: scratch, weights: weights, ramp: ramp, measure: false)
                }
            }
        } else {
            for c in 0..<channels {
                removeDC(base + c, blocks: blocks, blockLength: design.blockLength,
                                        log2Block: design.log2Block, stride: channels,
                                        kQ30: design.kQ30, dc: dcQ14 + c, last: lastSample + c)
            }
        }
        return .pass
    }

}

/// One channel (samples `stride` apart) of `HighPassFilter` through `blocks` blocks,
/// updating its estimate and last sample. (A free function: a static method on the
/// class would make the RT audit count a metadata access.)
@inline(__always)
func removeDC(_ x: UnsafeMutablePointer<Int16>, blocks: Int, blockLength: Int, log2Block: Int,
                     stride: Int, kQ30: Int64, dc: UnsafeMutablePointer<Int32>, last: UnsafeMutablePointer<Int32>) {
    var d = dc.pointee
    var xp = last.pointee
    var p = x
    for _ in 0..<blocks {
        var sum: Int32 = 0 // |sum| ≤ 16·2^15 = 2^19
        for i in 0..<blockLength { sum &+= Int32(p[i &* stride]) }
        // Trapezoidal mean over the B sample intervals ending at this block's samples,
        // (Σx + (x₋₁ − x_B−1)/2)/B: for B = 1 the update below is then exactly the
        // bilinear filter's d = p·d + (1 − p)·(x + x₋₁)/2, and for larger B it keeps the
        // estimate's phase on the same sample grid. ≤ 2^29 + 2^29 in Q14.
        let xl = Int32(p[(blockLength &- 1) &* stride])
        let meanQ14 = (sum &<< (14 &- log2Block)) &+ ((xp &- xl) &<< (13 &- log2Block))
        xp = xl
        // (μ − d)·k: ≤ 2^30·2^30 in 64 bits; rounded to a whole step per sample.
        let delta = (Int64(meanQ14 &- d) &* kQ30 &+ (1 << 29)) &>> 30
        let step = Int32(truncatingIfNeeded: (delta &+ Int64(blockLength &>> 1)) &>> Int64(log2Block))
        // The ramp as an induction (additions only: x86's baseline SSE2 has no 32-bit
        // lane multiply), with the rounding of the Q14 → sample shift folded in.
        var r = d &+ 0x2000
        for i in 0..<blockLength {
            r &+= step
            let y = Int32(p[i &* stride]) &- (r &>> 14)
            p[i &* stride] = Int16(truncatingIfNeeded: min(max(y, -32768), 32767))
        }
        d = d &+ step &<< Int32(truncatingIfNeeded: log2Block)
        p += blockLength &* stride
    }
    dc.pointee = d
    last.pointee = xp
}

/// `removeDC` for one mono channel in blocks of 4 (the default 80 Hz at 48 kHz), the
/// same arithmetic in three passes, so that only the recursion itself is serial:
/// 1. weighted pair sums of the block means, one packed multiply-add per 8 samples;
/// 2. the one-pole update, block by block, storing the estimate at each block start;
/// 3. the ramp between consecutive estimates, built vectorised across blocks into a
///    16-bit scratch and subtracted from the samples in sample order.
/// In one pass, every block's sum had to be reduced across a vector and its ramp built
/// from scalars (x86's baseline SSE2 has no 32-bit lane multiply): 42 instructions a
/// block. Per 48 kHz frame (bench/audio.sh embedded, kernel hpf80, -Osize): 17,779
/// instructions through the strided loop, 7,526 with a constant B = 4, 5,126 in one
/// pass with 4-lane vectors, 4,079 in three, 3,723 with the third split in two, 3,606
/// with the recursion four blocks an iteration, 3,505 with it on the estimate's quarter.
/// `scratch` holds `dc4ChunkBlocks` blocks' pair sums and estimates (quarters) and `ramp` their
/// subtrahends (longer frames go through in chunks); `weights` is the pattern 2, 2, 2, 1
/// over a chunk. With `measure`, returns the output's largest and smallest sample
/// (else zeros). Carrying the estimate in 64 bits, or computing whole block means in
/// pass 1 (a second multiply-add on samples one earlier), cost more; so did the
/// output's energy in pass 3b (LLVM split the samples into pairs for the peak too:
/// 24 instructions per 8 samples, against 15 + 15 per 16 in two loops), and the ramp
/// in explicit `SIMD4` code (Swift's SIMD conversions did not become a `packssdw`) or
/// as 32-bit words of two subtrahends (LLVM chose 2-lane vectors: 11.5 instructions a
/// block, against 7.75 now, 10 of them shuffles of the interleaving store).
/// Bit-exact with the one-pass form (HookEquivalenceTests keeps that as the reference).
/// `@_optimize(speed)` here as well as on the caller: should -Osize ever leave this
/// out of line, its loops are still vectorised (out of line at -Osize they were not:
/// 17,000 instructions a frame).
@inline(__always)
@_optimize(speed)
func removeDC4(_ x: UnsafeMutablePointer<Int16>, blocks: Int, kQ30: Int64,
               dc: UnsafeMutablePointer<Int32>, last: UnsafeMutablePointer<Int32>,
               scratch: UnsafeMutablePointer<Int32>, weights: UnsafePointer<Int16>,
               ramp: UnsafeMutablePointer<Int16>, measure: Bool) -> (hi: Int16, lo: Int16) {
    var hi: Int16 = 0
    var lo: Int16 = 0
    let d = dc.pointee
    let r = d & 3
    var e = d &>> 2
    var xp = last.pointee
    let pairs = scratch
    let starts = scratch + 2 &* dc4ChunkBlocks
    var done = 0
    while done < blocks {
        let n = min(blocks &- done, dc4ChunkBlocks)
        let p = x + done &* 4
        // 1. Block means in Q14: (Σx + (x₋₁ − x₃)/2)/4 · 2^14 = 2^11·(x₋₁ + 2x₀ + 2x₁ + 2x₂ + x₃).
        // The weighted pair sums 2x₀ + 2x₁ and 2x₂ + x₃ for every pair in one pass, a
        // packed multiply-add (x86 `pmaddwd`); |pair| ≤ 3·2^15.
        for k in 0..<(n &* 2) {
            pairs[k] = Int32(p[2 &* k]) &* Int32(weights[2 &* k]) &+ Int32(p[2 &* k &+ 1]) &* Int32(weights[2 &* k &+ 1])
        }
        // 2. The recursion, storing each block's starting estimate; x₋₁ is the previous
        // block's last sample. The mean is within ±2^18 before the shift, ±2^29 after.
        // The one-pass form rounds twice, δ = (v·k + 2^29) >> 30 and step = (δ + 2) >> 2;
        // floor((floor(a/2^30) + 2)/4) = floor((a + 2^31)/2^32) for an integer a, so one
        // shift gives the same step. |v| ≤ 2^30, k ≤ 2^30: v·k + 2^31 fits in 64 bits.
        // The estimate moves by whole multiples of 4, so the recursion runs on its quarter
        // e = d >> 2 (d = 4e + r, r = d & 3 fixed): with the mean's quarter μ/4 = 2^9·(…),
        // v·k + 2^31 + 2^29 = (μ/4 − e)·4k + (2^31 + 2^29 − r·k), and the step is e's
        // change itself (no mask to a multiple of 4 in the chain).
        let k4 = kQ30 &<< 2
        let rounding = ((1 << 29) &+ (1 << 31)) &- Int64(r) &* kQ30
        var b = 0
        while b &+ 4 <= n { // four blocks an iteration: a quarter of the loop overhead
            let q = pairs + 2 &* b
            let s = p + 4 &* b
            let st = starts + b
            let mean0 = (q[0] &+ q[1] &+ xp) &<< 9
            let mean1 = (q[2] &+ q[3] &+ Int32(s[3])) &<< 9
            let mean2 = (q[4] &+ q[5] &+ Int32(s[7])) &<< 9
            let mean3 = (q[6] &+ q[7] &+ Int32(s[11])) &<< 9
            xp = Int32(s[15])
            st[0] = e
            e = e &+ Int32(truncatingIfNeeded: (Int64(mean0 &- e) &* k4 &+ rounding) &>> 32)
            st[1] = e
            e = e &+ Int32(truncatingIfNeeded: (Int64(mean1 &- e) &* k4 &+ rounding) &>> 32)
            st[2] = e
            e = e &+ Int32(truncatingIfNeeded: (Int64(mean2 &- e) &* k4 &+ rounding) &>> 32)
            st[3] = e
            e = e &+ Int32(truncatingIfNeeded: (Int64(mean3 &- e) &* k4 &+ rounding) &>> 32)
            b &+= 4
        }
        while b < n {
            let mean = (pairs[2 &* b] &+ pairs[2 &* b &+ 1] &+ xp) &<< 9
            xp = Int32(p[4 &* b &+ 3])
            starts[b] = e
            e = e &+ Int32(truncatingIfNeeded: (Int64(mean &- e) &* k4 &+ rounding) &>> 32)
            b &+= 1
        }
        starts[n] = e
        // 3. y = x − (d + 0x2000 + step·(i + 1)) >> 14, saturated, with the step the
        // exact quarter of the estimate's change over the block. The ramp stays between
        // two consecutive estimates, each in [−2^29 − 3, 2^29 − 2^14 + 3] (a rounded step
        // towards a block mean in [−2^29, 2^29 − 2^14]): the additions cannot overflow,
        // and the ramp >> 14 is in [−32768, 32767].
        // 3a. The subtrahends, vectorised across blocks (LLVM packs them to 16 bits and
        // interleaves them into sample order as it stores).
        let offset = r &+ 0x2000
        for b in 0..<n {
            let step = starts[b &+ 1] &- starts[b]
            let r1 = (starts[b] &<< 2) &+ offset &+ step
            let r2 = r1 &+ step
            let r3 = r2 &+ step
            let q = ramp + b &* 4
            q[0] = saturate16(r1 &>> 14)
            q[1] = saturate16(r2 &>> 14)
            q[2] = saturate16(r3 &>> 14)
            q[3] = saturate16((r3 &+ step) &>> 14)
        }
        // 3b. The subtraction in sample order, a saturating 16-bit subtract (x86 `psubsw`),
        // and in a chain the output's peak. In one pass with 3a, the samples had to be
        // gathered into per-block lanes and scattered back: 67 instructions per 16
        // samples, 35 + 13 in two.
        for i in 0..<(n &* 4) {
            let y = saturate16(Int32(p[i]) &- Int32(ramp[i]))
            p[i] = y
            if measure {
                hi = max(hi, y)
                lo = min(lo, y)
            }
        }
        done &+= n
    }
    dc.pointee = (e &<< 2) | r
    last.pointee = xp
    return (hi, lo)
}

/// Blocks of 4 `removeDC4` handles at once (a 48 kHz mono frame has 120); its scratch
/// holds two pair sums a block, the estimate at the start of each block and after the
/// last.
let dc4ChunkBlocks = 128
let dc4ScratchCount = 3 * dc4ChunkBlocks + 1

// MARK: - Gain

/// A constant gain in dB (−40…+40), changeable from any thread while audio runs; a
/// change ramps over one frame.
public final class GainHook: AudioHook, @unchecked Sendable {
    /// The requested gain packed as mantissa << 8 | shift.
    private let requested: Atomic<Int>
    private let current: UnsafeMutablePointer<FixedGain>

    public init(gainDB: Double = 0) throws(AudioError) {
        try checkRange(.gainDB, gainDB, -40, 40)
        let g = FixedGain(linear: ConfigMath.dbToLinear(gainDB))
        requested = Atomic<Int>(GainHook.pack(g))
        current = .allocate(capacity: 1)
        current.initialize(to: g)
    }

    deinit { current.deallocate() }

    /// Sets the gain (any thread); the audio thread ramps to it over the next frame.
    public func setGain(dB: Double) throws(AudioError) {
        try checkRange(.gainDB, dB, -40, 40)
        requested.store(GainHook.pack(FixedGain(linear: ConfigMath.dbToLinear(dB))), ordering: .relaxed)
    }

    /// The gain in effect as a linear factor (as quantised).
    public var gain: FixedGain { GainHook.unpack(requested.load(ordering: .relaxed)) }

    static func pack(_ g: FixedGain) -> Int { Int(g.mantissa) &<< 8 | Int(g.shift) }
    @inline(__always) static func unpack(_ v: Int) -> FixedGain {
        FixedGain(mantissa: Int32(truncatingIfNeeded: v &>> 8), shift: Int32(truncatingIfNeeded: v & 0xFF))
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        let v = requested.load(ordering: .relaxed)
        current.pointee = FixedGain(mantissa: Int32(truncatingIfNeeded: v &>> 8), shift: Int32(truncatingIfNeeded: v & 0xFF))
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let v = requested.load(ordering: .relaxed)
        let target = FixedGain(mantissa: Int32(truncatingIfNeeded: v &>> 8), shift: Int32(truncatingIfNeeded: v & 0xFF))
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        applyGainRamp(frame, channels: info.channels, from: current.pointee, to: target)
        current.pointee = target
        return .pass
    }
}

// MARK: - Automatic gain control

struct AGCState {
    /// Current gain, log2 of the amplitude ratio in Q24: the extra 8 bits below the Q16
    /// the gain is made from keep the one-pole step from stalling a few Q16 units short
    /// of the target (the step is error·k, k ≈ 0.02).
    var gainLog2Q24: Int64
    var gain: FixedGain
}

/// Automatic gain control towards a target RMS level, in the log domain.
///
/// Once per frame: the frame's mean square → log2 (Q16); if the level is above the noise
/// floor, the wanted gain is (target − level)/2 in log2-amplitude units, clamped to the
/// gain range; the gain moves towards it by a one-pole step per frame, with the attack
/// coefficient when the gain must fall (too loud) and the release one when it may rise.
/// Below the noise floor the gain holds, so pauses are not pumped up. The new gain
/// (2^x by polynomial) is applied as a linear ramp from the previous frame's gain.
public final class AutomaticGainControl: AudioHook, @unchecked Sendable {
    public let targetDBFS: Double
    public let attackMilliseconds: Double
    public let releaseMilliseconds: Double
    public let maxGainDB: Double
    public let minGainDB: Double
    public let noiseFloorDBFS: Double
    private let targetLog2: Int32
    private let floorLog2: Int32
    private let maxLog2: Int32
    private let minLog2: Int32
    private let attackQ15: Int32
    private let releaseQ15: Int32
    private let state: UnsafeMutablePointer<AGCState>

    /// - targetDBFS: −40…−3 (RMS; a full-scale sine is −3.01).
    /// - attackMilliseconds: 1…2000, time constant of gain decrease.
    /// - releaseMilliseconds: 10…10000, time constant of gain increase.
    /// - maxGainDB: 0…40; minGainDB: −40…0.
    /// - noiseFloorDBFS: −90…−20; quieter frames leave the gain alone.
    public init(targetDBFS: Double = -18, attackMilliseconds: Double = 20, releaseMilliseconds: Double = 400,
                maxGainDB: Double = 24, minGainDB: Double = -12, noiseFloorDBFS: Double = -60) throws(AudioError) {
        try checkRange(.targetDBFS, targetDBFS, -40, -3)
        try checkRange(.attackMilliseconds, attackMilliseconds, 1, 2000)
        try checkRange(.releaseMilliseconds, releaseMilliseconds, 10, 10000)
        try checkRange(.maxGainDB, maxGainDB, 0, 40)
        try checkRange(.minGainDB, minGainDB, -40, 0)
        try checkRange(.noiseFloorDBFS, noiseFloorDBFS, -90, -20)
        self.targetDBFS = targetDBFS
        self.attackMilliseconds = attackMilliseconds
        self.releaseMilliseconds = releaseMilliseconds
        self.maxGainDB = maxGainDB
        self.minGainDB = minGainDB
        self.noiseFloorDBFS = noiseFloorDBFS
        targetLog2 = meanSquareLog2Q16(dBFS: targetDBFS)
        floorLog2 = meanSquareLog2Q16(dBFS: noiseFloorDBFS)
        maxLog2 = amplitudeLog2Q16(dB: maxGainDB)
        minLog2 = amplitudeLog2Q16(dB: minGainDB)
        attackQ15 = onePoleQ15(milliseconds: attackMilliseconds)
        releaseQ15 = onePoleQ15(milliseconds: releaseMilliseconds)
        state = .allocate(capacity: 1)
        state.initialize(to: AGCState(gainLog2Q24: 0, gain: .unity))
    }

    deinit { state.deallocate() }

    /// The gain in effect, in dB (any thread may read it approximately; tests use it).
    public var currentGainDB: Double { Double(state.pointee.gainLog2Q24) / 16777216 * 20 * ConfigMath.log10(2) }
    /// The per-frame attack and release coefficients as quantised (Q15 / 32768).
    public var attackCoefficient: Double { Double(attackQ15) / 32768 }
    public var releaseCoefficient: Double { Double(releaseQ15) / 32768 }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        state.pointee = AGCState(gainLog2Q24: 0, gain: .unity)
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        let cached = cachedLevels(info)
        let e = cached?.energy ?? energy(frame)
        var g = state.pointee.gainLog2Q24
        if e > 0 {
            let level = meanSquareLog2Q16(energy: e, count: frame.count)
            if level >= floorLog2 {
                let wanted = Int64(min(max((targetLog2 &- level) &>> 1, minLog2), maxLog2)) &<< 8
                let k = Int64(wanted < g ? attackQ15 : releaseQ15)
                g = g &+ (((wanted &- g) &* k &+ 0x4000) &>> 15)
            }
        }
        let newGain = FixedGain(log2Q16: Int32(truncatingIfNeeded: (g &+ 128) &>> 8))
        let oldGain = state.pointee.gain
        // (Locals only in the condition: an `&&` over `state` would capture self.)
        if let cached, newGain == .unity && oldGain == .unity {
            publishLevels(info, peak: cached.peak, energy: cached.energy) // unity: unchanged
        }
        applyGainRamp(frame, channels: info.channels, from: oldGain, to: newGain)
        state.pointee.gainLog2Q24 = g
        state.pointee.gain = newGain
        return .pass
    }
}

// MARK: - Noise gate

struct GateState {
    var gainQ15: Int32
    var holdLeft: Int
}

/// Noise gate: open (unity) while the frame RMS is at or above the threshold and for
/// `hold` after it falls below, then the gain decays exponentially with the release
/// time constant to zero. Opening takes one frame (a ramp up). Gain changes are ramped
/// across the frame. A fully closed frame returns `.silence`.
public final class NoiseGate: AudioHook, @unchecked Sendable {
    public let thresholdDBFS: Double
    public let holdMilliseconds: Double
    public let releaseMilliseconds: Double
    private let thresholdLog2: Int32
    private let holdFrames: Int
    /// e^(−10 ms/τ) in Q15: the gain kept per frame while releasing.
    private let keepQ15: Int32
    private let state: UnsafeMutablePointer<GateState>

    /// - thresholdDBFS: −90…0 (frame RMS).
    /// - holdMilliseconds: 0…5000 (rounded to whole frames).
    /// - releaseMilliseconds: 1…5000, time constant of the closing decay.
    public init(thresholdDBFS: Double = -50, holdMilliseconds: Double = 200, releaseMilliseconds: Double = 100) throws(AudioError) {
        try checkRange(.thresholdDBFS, thresholdDBFS, -90, 0)
        try checkRange(.holdMilliseconds, holdMilliseconds, 0, 5000)
        try checkRange(.releaseMilliseconds, releaseMilliseconds, 1, 5000)
        self.thresholdDBFS = thresholdDBFS
        self.holdMilliseconds = holdMilliseconds
        self.releaseMilliseconds = releaseMilliseconds
        thresholdLog2 = meanSquareLog2Q16(dBFS: thresholdDBFS)
        holdFrames = Int(saturating: (holdMilliseconds / 10).rounded())
        keepQ15 = Int32(saturating: (ConfigMath.exp(-10 / releaseMilliseconds) * 32768).rounded())
        state = .allocate(capacity: 1)
        state.initialize(to: GateState(gainQ15: 32768, holdLeft: holdFrames))
    }

    deinit { state.deallocate() }

    /// The per-frame release factor as quantised (Q15 / 32768), for reference models.
    public var releaseFactor: Double { Double(keepQ15) / 32768 }
    public var holdFrameCount: Int { holdFrames }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        state.pointee = GateState(gainQ15: 32768, holdLeft: holdFrames)
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        let cached = cachedLevels(info)
        let e = cached?.energy ?? energy(frame)
        let g0 = state.pointee.gainQ15
        var g1: Int32
        // (No `&&`: its autoclosure captures self, which the RT audit counts as a retain.)
        var loud = false
        if e > 0 { loud = meanSquareLog2Q16(energy: e, count: frame.count) >= thresholdLog2 }
        if loud {
            g1 = 32768
            state.pointee.holdLeft = holdFrames
        } else if state.pointee.holdLeft > 0 {
            state.pointee.holdLeft &-= 1
            g1 = 32768
        } else {
            g1 = mul16x16Q15(g0, keepQ15)
            if g1 < 4 { g1 = 0 } // below −78 dB: closed
        }
        state.pointee.gainQ15 = g1
        if g0 == 0 && g1 == 0 {
            zeroFrame(frame)
            return .silence
        }
        if let cached, g0 == 32768 && g1 == 32768 {
            publishLevels(info, peak: cached.peak, energy: cached.energy) // open: unchanged
        }
        applyGainRamp(frame, channels: info.channels, from: FixedGain(mantissa: g0, shift: 15),
                      to: FixedGain(mantissa: g1, shift: 15))
        return .pass
    }
}

// MARK: - Limiter

struct LimiterState {
    var gainQ15: Int32
    var previousPeak: Int32
    var delayedCount: Int
}

/// Peak limiter with a ceiling in dBFS. Per frame the gain needed to bring the frame's
/// peak to the ceiling is ceiling/peak (Q15); the gain falls to it at once (attack) and
/// recovers towards unity with the release time constant, ramped across the frame. The
/// recovery moves at least one Q15 unit a frame, so it ends exactly at unity, at most
/// ln(2^15)·τ (10.4 time constants, 520 ms for the default 50 ms) plus two frames after
/// the last frame above the ceiling (checked exhaustively for every Q15 coefficient of
/// τ in 1…5000 ms and every gain a ceiling allows); from then on frames pass unchanged.
///
/// Without lookahead a falling gain is applied as a step at the frame start, so no
/// sample exceeds the ceiling. With lookahead (10 ms more latency) the frame is delayed
/// by one frame and the gain ramps down across the delayed frame to the minimum needed
/// by both the delayed and the incoming frame: the output never exceeds the ceiling and
/// has no gain steps.
public final class Limiter: AudioHook, @unchecked Sendable {
    public let ceilingDBFS: Double
    public let releaseMilliseconds: Double
    public let lookahead: Bool
    /// The ceiling as a sample magnitude.
    public let ceiling: Int32
    private let releaseQ15: Int32
    private let delay: UnsafeMutablePointer<Int16>
    private let delayCapacity: Int
    private let state: UnsafeMutablePointer<LimiterState>

    /// - ceilingDBFS: −30…0 (peak, relative to 32768).
    /// - releaseMilliseconds: 1…5000.
    /// - lookahead: delay by one frame to ramp the gain down before peaks.
    public init(ceilingDBFS: Double = -1, releaseMilliseconds: Double = 50, lookahead: Bool = false) throws(AudioError) {
        try checkRange(.ceilingDBFS, ceilingDBFS, -30, 0)
        try checkRange(.releaseMilliseconds, releaseMilliseconds, 1, 5000)
        self.ceilingDBFS = ceilingDBFS
        self.releaseMilliseconds = releaseMilliseconds
        self.lookahead = lookahead
        ceiling = min(Int32(saturating: (32768 * ConfigMath.dbToLinear(ceilingDBFS)).rounded(.down)), 32767)
        releaseQ15 = onePoleQ15(milliseconds: releaseMilliseconds)
        delayCapacity = lookahead ? SampleRate.hz48000.samplesPerFrame * AudioFormat.maxChannels : 0
        delay = .allocate(capacity: max(delayCapacity, 1))
        delay.initialize(repeating: 0, count: max(delayCapacity, 1))
        state = .allocate(capacity: 1)
        state.initialize(to: LimiterState(gainQ15: 32768, previousPeak: 0, delayedCount: 0))
    }

    deinit {
        delay.deallocate()
        state.deallocate()
    }

    /// The per-frame release coefficient as quantised, for reference models.
    public var releaseCoefficient: Double { Double(releaseQ15) / 32768 }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        state.pointee = LimiterState(gainQ15: 32768, previousPeak: 0, delayedCount: 0)
        if delayCapacity > 0 { zeroFrame(UnsafeMutableBufferPointer(start: delay, count: delayCapacity)) }
    }

    /// Gain (Q15) that brings `peak` down to the ceiling; unity if it is below.
    @inline(__always)
    private func needed(_ peak: Int32) -> Int32 {
        peak > ceiling ? (ceiling &<< 15) / peak : 32768
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        // The peak from the chain's cache if the hook before measured this frame; in a
        // chain otherwise peak and energy in one pass, for the hooks after it (the meter).
        var peak: Int32
        var e: Int64 = -1
        if let l = cachedLevels(info) {
            peak = l.peak
            e = l.energy
        } else if hasLevelCache(info) {
            (peak, e) = peakAndEnergy(frame)
        } else {
            peak = Audio.peak(frame)
        }
        let g0 = state.pointee.gainQ15
        // At least one Q15 unit up while below unity: once (32768 − g)·k < 2^14 the
        // rounded step is zero, and the gain would stay at 32766 or 32767 for ever,
        // scaling every frame (and never handing the levels on in a chain).
        let released = g0 &+ max(mul16x16Q15(32768 &- g0, releaseQ15), min(32768 &- g0, 1))
        var direct = !lookahead
        if frame.count > delayCapacity { direct = true }
        if direct {
            let g1 = min(needed(peak), released)
            state.pointee.gainQ15 = g1
            // At unity throughout the frame is unchanged: its levels stay valid.
            if g0 == 32768 && g1 == 32768 && e >= 0 { publishLevels(info, peak: peak, energy: e) }
            if g1 < g0 {
                applyGain(frame, FixedGain(mantissa: g1, shift: 15))
            } else if g0 != 32768 || g1 != 32768 { // (at unity, not even the call: -Osize keeps it out of line)
                applyGainRamp(frame, channels: info.channels, from: FixedGain(mantissa: g0, shift: 15),
                              to: FixedGain(mantissa: g1, shift: 15))
            }
            return .pass
        }
        // Lookahead: out ← delayed frame, delay ← this frame.
        let g1 = min(min(needed(peak), needed(state.pointee.previousPeak)), released)
        for i in frame.indices {
            let t = frame[i]
            frame[i] = delay[i]
            delay[i] = t
        }
        state.pointee.previousPeak = peak
        state.pointee.gainQ15 = g1
        applyGainRamp(frame, channels: info.channels, from: FixedGain(mantissa: g0, shift: 15),
                      to: FixedGain(mantissa: g1, shift: 15))
        return .pass
    }
}

// MARK: - Level meter

/// Peak and RMS level of each frame, for LEDs and logs, readable from any thread. Both
/// values of a frame are published together in one atomic word (peak in the top 16
/// bits, mean square in Q8 below), so a reader never mixes two frames.
public final class LevelMeter: AudioHook, @unchecked Sendable {
    private let reading = Atomic<UInt64>(0)
    private let frames = Atomic<Int>(0)

    public init() {}

    /// Largest magnitude of the last frame, 0…32768.
    public var peak: Int { Int(reading.load(ordering: .relaxed) &>> 48) }
    /// Mean square of the last frame (sample units squared).
    public var meanSquare: Double { Double(reading.load(ordering: .relaxed) & 0xFFFF_FFFF_FFFF) / 256 }
    /// Peak level in dBFS (0 dBFS = 32768); −∞ for silence.
    public var peakDBFS: Double { ConfigMath.linearToDB(Double(peak) / 32768) }
    /// RMS level in dBFS (full-scale square wave = 0, full-scale sine = −3.01); −∞ for silence.
    public var rmsDBFS: Double { 10 * ConfigMath.log10(meanSquare / 1073741824) }
    /// Frames measured so far.
    public var frameCount: Int { frames.load(ordering: .relaxed) }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        // Measured by the hook before (and the frame unchanged since) or here; either
        // way unchanged for the hook after.
        let (peak, e) = cachedLevels(info) ?? peakAndEnergy(frame)
        publishLevels(info, peak: peak, energy: e)
        // E·256/n ≤ 2^30·256 = 2^38: fits the low 48 bits.
        let msQ8 = frame.count > 0 ? UInt64(e &<< 8) / UInt64(frame.count) : 0
        reading.store(UInt64(peak) &<< 48 | msQ8, ordering: .relaxed)
        frames.store(frames.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        return .pass
    }
}

// MARK: - Mute gate

/// Mute: while muted, frames become silence, but they keep flowing, so sequence numbers
/// and timestamps continue and the far end hears silence rather than a gap. Muting and
/// unmuting fade over one frame to avoid a click. `setMuted` may be called from any thread.
public final class MuteGate: AudioHook, @unchecked Sendable {
    private let muted: Atomic<Bool>
    private let wasMuted: UnsafeMutablePointer<Bool>

    public init(muted: Bool = false) {
        self.muted = Atomic<Bool>(muted)
        wasMuted = .allocate(capacity: 1)
        wasMuted.initialize(to: muted)
    }

    deinit { wasMuted.deallocate() }

    public var isMuted: Bool { muted.load(ordering: .relaxed) }
    public func setMuted(_ value: Bool) { muted.store(value, ordering: .relaxed) }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        wasMuted.pointee = muted.load(ordering: .relaxed)
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let m = muted.load(ordering: .relaxed)
        let was = wasMuted.pointee
        wasMuted.pointee = m
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        if m && was {
            zeroFrame(frame)
            return .silence
        }
        if m != was {
            applyGainRamp(frame, channels: info.channels, from: m ? .unity : .zero, to: m ? .zero : .unity)
        } else if let l = cachedLevels(info) {
            publishLevels(info, peak: l.peak, energy: l.energy) // unmuted: unchanged
        }
        return .pass
    }
}
