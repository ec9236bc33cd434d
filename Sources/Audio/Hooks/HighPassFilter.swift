// The DC removal / high-pass hook (`HighPassFilter`) and the block arithmetic behind
// it (`removeDC`, `removeDC4`): free functions, so the RT audit counts no metadata
// access, and kept beside the one hook that uses them.
import Wire

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
