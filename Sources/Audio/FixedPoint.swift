/// Fixed-point building blocks. Names say width and Q format (after Opus'
/// `celt/fixed_generic.h`): `mul16x16Q15` multiplies two Q15 values into Q15.
/// Hot loops use wrapping operators (`&*`, `&+`, `&>>`) with ranges argued in comments,
/// and saturate with `min`/`max` before `Int16(truncatingIfNeeded:)`, which LLVM
/// vectorises (`Int16(clamping:)` does not).

/// Saturates a 32-bit value to 16 bits.
@inline(__always)
@_optimize(speed)
func saturate16(_ v: Int32) -> Int16 {
    Int16(truncatingIfNeeded: min(max(v, -32768), 32767))
}

/// (a·b) >> 15 with rounding, for Q15 operands whose product fits in 32 bits.
@inline(__always)
@_optimize(speed)
func mul16x16Q15(_ a: Int32, _ b: Int32) -> Int32 {
    (a &* b &+ 0x4000) &>> 15
}

/// (a·b) >> 30 with rounding, a and b Q30 or mixed such that the product fits in 64 bits.
@inline(__always)
@_optimize(speed)
func mul32x32Q30(_ a: Int64, _ b: Int64) -> Int64 {
    (a &* b &+ (1 << 29)) &>> 30
}

/// A linear gain as a Q15 mantissa and a right shift: gain = mantissa / 2^shift.
/// A mantissa in 16384…32768 keeps 15 bits of relative precision from −90 dB to +84 dB,
/// and `sample · mantissa` always fits in 32 bits (|sample| ≤ 2^15, mantissa ≤ 2^15).
public struct FixedGain: Sendable, Equatable {
    /// 0…32768.
    public var mantissa: Int32
    /// 1…30.
    public var shift: Int32

    @inline(__always) init(mantissa: Int32, shift: Int32) {
        self.mantissa = mantissa
        self.shift = shift
    }

    public static let unity = FixedGain(mantissa: 32768, shift: 15)
    public static let zero = FixedGain(mantissa: 0, shift: 15)

    /// The nearest representable gain to `linear` (configuration time). Gains past 2^14
    /// are clamped there, below 2^-16 they become zero.
    public init(linear: Double) {
        if !(linear > 0) { self = .zero; return }
        // Find shift so that linear·2^shift ∈ [16384, 32768).
        var shift: Int32 = 15
        var scaled = linear * 32768
        while scaled >= 32768 && shift > 1 { scaled /= 2; shift -= 1 }
        while scaled < 16384 && shift < 30 { scaled *= 2; shift += 1 }
        var m = scaled.rounded()
        if m > 32768 { m = 32768 }
        self.init(mantissa: Int32(m), shift: shift)
        if scaled < 0.5 { self = .zero }
    }

    /// The gain 2^(log2Q16 / 65536): the exponent is a log2 in Q16 (±16 octaves).
    /// Computed with a degree-5 polynomial for 2^f on [0, 1) (max error 1.1e-7,
    /// coefficients in Q30), so no table and no floating point on the hot path.
    @inline(__always)
    public init(log2Q16 l: Int32) {
        let e = l &>> 16                 // floor(log2 gain)
        let f = Int64(l & 0xFFFF) &<< 14 // fraction in Q30
        var p: Int64 = 2_034_857
        p = mul32x32Q30(p, f) &+ 9_605_936
        p = mul32x32Q30(p, f) &+ 59_982_717
        p = mul32x32Q30(p, f) &+ 257_849_206
        p = mul32x32Q30(p, f) &+ 744_269_102
        p = mul32x32Q30(p, f) &+ 1_073_741_712 // 2^f in Q30, [2^30, 2^31)
        // gain = 2^f·2^e = (p / 2^31)·2^(e+1) → mantissa = p >> 16 (16384…32768),
        // shift = 14 − e.
        let m = Int32(truncatingIfNeeded: (p &+ 0x8000) &>> 16)
        let s = 14 &- e
        if s < 1 {
            self.init(mantissa: 32768, shift: 1)  // clamp at 2^14
        } else if s > 30 {
            self.init(mantissa: 0, shift: 15)
        } else {
            self.init(mantissa: m, shift: s)
        }
    }

    /// The gain as a Double (for tests and readings).
    public var linear: Double { Double(mantissa) / Double(Int64(1) << Int64(shift)) }
}

/// log2(x) in Q16 for x ≥ 1 (0 for x = 0), from the position of the top bit and a
/// degree-5 polynomial for log2(1 + m) on [0, 1) (max error 1.5e-5, Q30 coefficients).
@inline(__always)
@_optimize(speed)
func log2Q16(_ x: UInt64) -> Int32 {
    if x == 0 { return 0 }
    let top = 63 &- x.leadingZeroBitCount
    // Mantissa m ∈ [0, 1) in Q30.
    let m: Int64
    if top >= 30 {
        m = Int64(truncatingIfNeeded: (x &>> UInt64(top &- 30))) & 0x3FFF_FFFF
    } else {
        m = Int64(truncatingIfNeeded: (x &<< UInt64(30 &- top))) & 0x3FFF_FFFF
    }
    var p: Int64 = 47_169_018
    p = mul32x32Q30(p, m) &- 203_835_289
    p = mul32x32Q30(p, m) &+ 441_916_496
    p = mul32x32Q30(p, m) &- 759_410_736
    p = mul32x32Q30(p, m) &+ 1_547_898_383
    p = mul32x32Q30(p, m) &+ 15_413 // log2(1+m) in Q30
    return Int32(truncatingIfNeeded: (Int64(top) &<< 16) &+ ((p &+ 0x2000) &>> 14))
}

/// The peak and energy of the frame as it is between two hooks of a `HookChain`, so a
/// hook that needs them (limiter, meter, AGC, noise gate) does not measure a frame the
/// hook before it measured and left unchanged. Valid only under its stamp: the chain
/// gives each hook it calls the next stamp (one more than the hook before it in the
/// same frame, and every stamp is used once), so levels are read only if the hook just
/// before wrote them for the frame it handed on. A hook that changes the samples writes
/// nothing (or the levels of what it wrote), hooks that know nothing of the cache (user
/// hooks) write nothing, and a `.silence` verdict makes the chain store the zeroed
/// frame's levels. Whichever hooks are on, a stale value is never read.
struct FrameLevels {
    var stamp: UInt64
    var peak: Int32
    var energy: Int64
}

/// One hook's view of the chain's level cache: where it is and the stamp under which
/// this hook may read it. A hook sees it only through `cachedLevels`, `publishLevels`
/// and `hasLevelCache`, which say what they mean, not how the cache is reached.
///
/// Sendable although it holds a pointer: `FrameInfo` is, and the view is only used by
/// the thread running the chain, during the `process` call it was handed to, while the
/// chain (which owns the cache) is alive.
struct LevelCacheView: @unchecked Sendable {
    var slot: UnsafeMutablePointer<FrameLevels>?
    var stamp: UInt64

    static let none = LevelCacheView(slot: nil, stamp: 0)
}

/// The frame's levels if the chain's cache holds them for this hook's input.
@inline(__always)
func cachedLevels(_ info: FrameInfo) -> (peak: Int32, energy: Int64)? {
    guard let l = info.levelCache.slot, l.pointee.stamp == info.levelCache.stamp else { return nil }
    return (l.pointee.peak, l.pointee.energy)
}

/// Records `levels` as those of the frame this hook hands on (its output).
@inline(__always)
func publishLevels(_ info: FrameInfo, peak: Int32, energy: Int64) {
    guard let l = info.levelCache.slot else { return }
    l.pointee = FrameLevels(stamp: info.levelCache.stamp &+ 1, peak: peak, energy: energy)
}

/// Whether the hook runs inside a chain with a level cache.
@inline(__always)
func hasLevelCache(_ info: FrameInfo) -> Bool { info.levelCache.slot != nil }

/// Level measurements of a frame: the largest magnitude and the sum of squares.
@inline(__always)
@_optimize(speed)
func peakAndEnergy(_ s: UnsafeMutableBufferPointer<Int16>) -> (peak: Int32, energy: Int64) {
    (peak(s), energy(s))
}

/// The largest magnitude (0…32768). Tracks the largest and the smallest sample, which
/// vectorises to packed 16-bit max/min (no absolute value of −32768 to special-case).
@inline(__always)
@_optimize(speed)
func peak(_ s: UnsafeMutableBufferPointer<Int16>) -> Int32 {
    var hi: Int16 = 0
    var lo: Int16 = 0
    for v in s {
        hi = max(hi, v)
        lo = min(lo, v)
    }
    return max(Int32(hi), 0 &- Int32(lo))
}

/// Sum of squares. Squares are added in pairs in 32 bits — a² + b² ≤ 2^31 fits
/// unsigned — which LLVM turns into a packed multiply-add (x86 `pmaddwd`, arm64
/// `smull`/`smlal`). The pair sums are accumulated as their high and low 16 bits in two
/// 32-bit sums, which stay in 32-bit lanes: widening every pair sum to 64 bits cost
/// 780 instructions a 48 kHz frame (4-sample loads, two 64-bit adds), this 450. Each
/// half adds at most 2^16 a pair, so a chunk of 2^16 samples (2^15 pairs) sums to at
/// most 2^31; chunks are added in 64 bits.
@inline(__always)
@_optimize(speed)
func energy(_ s: UnsafeMutableBufferPointer<Int16>) -> Int64 {
    guard let p = s.baseAddress else { return 0 }
    let n = s.count
    var e: UInt64 = 0
    var start = 0
    while n &- start >= 2 {
        let pairs = min(n &- start, 1 << 16) &>> 1
        let q = p + start
        var hi: UInt32 = 0
        var lo: UInt32 = 0
        for k in 0..<pairs {
            let a = Int32(q[2 &* k])
            let b = Int32(q[2 &* k &+ 1])
            let pair = UInt32(bitPattern: a &* a &+ b &* b)
            hi &+= pair &>> 16
            lo &+= pair & 0xFFFF
        }
        e &+= UInt64(hi) &<< 16 &+ UInt64(lo)
        start &+= pairs &<< 1
    }
    if n & 1 != 0 {
        let a = Int32(p[n &- 1])
        e &+= UInt64(UInt32(bitPattern: a &* a))
    }
    return Int64(bitPattern: e)
}

/// log2 of a frame's mean square in Q16 (full scale square wave = 30·65536); 0 for silence.
@inline(__always)
@_optimize(speed)
func meanSquareLog2Q16(energy: Int64, count: Int) -> Int32 {
    if energy <= 0 || count <= 0 { return 0 }
    // log2(E/n) = log2(E) − log2(n); E scaled by 2^8 so quiet frames keep precision.
    return log2Q16(UInt64(energy) &<< 8) &- log2Q16(UInt64(count) &<< 8)
}

/// Multiplies every sample by a constant gain, rounding and saturating.
@inline(__always)
@_optimize(speed)
func applyGain(_ s: UnsafeMutableBufferPointer<Int16>, _ g: FixedGain) {
    let m = g.mantissa
    let shift = g.shift
    let round = Int32(1) &<< (shift &- 1)
    // |x·m| ≤ 2^15·2^15 = 2^30, + round ≤ 2^29: fits in Int32.
    for i in s.indices {
        s[i] = saturate16((Int32(s[i]) &* m &+ round) &>> shift)
    }
}

/// Multiplies the frame by a gain moving linearly from `g0` to `g1`: the gain for
/// sample frame i (all channels alike) is g0 + (g1 − g0)·(i + 1)/frames, so the ramp ends
/// exactly on `g1`, the gain the next frame starts from.
@inline(__always)
@_optimize(speed)
func applyGainRamp(_ s: UnsafeMutableBufferPointer<Int16>, channels: Int, from g0: FixedGain, to g1: FixedGain) {
    if g0 == g1 {
        if g0 != .unity { applyGain(s, g0) }
        return
    }
    let frames = s.count / channels
    if frames == 0 { return }
    // One shift for the whole ramp: the smaller one (the larger gain's exponent).
    let shift = min(g0.shift, g1.shift)
    let m0 = g0.mantissa &>> (g0.shift &- shift)
    let m1 = g1.mantissa &>> (g1.shift &- shift)
    let round = Int32(1) &<< (shift &- 1)
    // Mantissa in Q8 so the step keeps fractional precision: 32768·256 = 2^23.
    let step = ((m1 &- m0) &<< 8) / Int32(frames)
    let last = m1 &<< 8
    // Fast mono path: when both ends fit Int16 (all but ramps touching exactly 32768,
    // i.e. unity or another power of two), the products are Int16 × Int16 → Int32,
    // one packed multiply pair on SSE2 (a 32-bit lane multiply costs three
    // instructions there), and the ramp is an induction without a per-sample branch.
    var acc = m0 &<< 8
    if channels == 1 {
        if max(m0, m1) <= 32767 {
            // Samples 0…frames−2 in a loop with the ramp as an induction; the last one
            // gets exactly m1, the gain the next frame starts from.
            for f in 0..<(frames &- 1) {
                acc &+= step
                let m = Int32(Int16(truncatingIfNeeded: acc &>> 8))
                s[f] = saturate16((Int32(s[f]) &* m &+ round) &>> shift)
            }
            s[frames &- 1] = saturate16((Int32(s[frames &- 1]) &* m1 &+ round) &>> shift)
            return
        }
        for f in 0..<frames {
            acc = (f == frames &- 1) ? last : acc &+ step
            let m = acc &>> 8
            s[f] = saturate16((Int32(s[f]) &* m &+ round) &>> shift)
        }
        return
    }
    var i = 0
    for f in 0..<frames {
        acc = (f == frames &- 1) ? last : acc &+ step
        let m = acc &>> 8
        for _ in 0..<channels {
            s[i] = saturate16((Int32(s[i]) &* m &+ round) &>> shift)
            i &+= 1
        }
    }
}

/// Zeroes a frame.
@inline(__always)
@_optimize(speed)
func zeroFrame(_ s: UnsafeMutableBufferPointer<Int16>) {
    if let base = s.baseAddress { UnsafeMutableRawPointer(base).initializeMemory(as: UInt8.self, repeating: 0, count: s.count &* 2) }
}

/// Copies `count` samples (memmove semantics; a plain byte copy, no element assignment).
@inline(__always)
@_optimize(speed)
func copySamples(_ dst: UnsafeMutablePointer<Int16>, _ src: UnsafePointer<Int16>, _ count: Int) {
    UnsafeMutableRawPointer(dst).copyMemory(from: UnsafeRawPointer(src), byteCount: count &* 2)
}
