/// The microWakeWord model runner, part 2: the kernels.
///
/// They reproduce what TensorFlow Lite 2.17's builtin kernels compute on x86-64 in the
/// libtensorflowlite_c.so that pymicro-wakeword 2.5.0 bundles (its judge), which is not
/// always the "reference" kernels: that library is built with the optimized kernels, with
/// NEON code compiled onto SSE4 through NEON_2_SSE, and with ruy's AVX2 kernels for
/// int8 matrix products. The two rescaling variants below are the ones that matter;
/// checking every intermediate tensor against that library over ~13,700 inferences per
/// model showed which op uses which (Model.swift's planner records the choice).
///
/// Everything here runs inside `invoke()`: no allocation, no traps on wrapping int32
/// arithmetic (C's `int` accumulates with wrap-around in practice, so `&+`/`&*`). The
/// kernels are `@_optimize(speed)` so that the -Osize release build still vectorises them
/// (about 1.8× fewer instructions).

// MARK: - Rescaling (MultiplyByQuantizedMultiplier and its vector variants)

/// x · m · 2^shift with m a Q31 multiplier, rounded the way TFLite's vector paths do:
/// the custom GEMV of cpu_backend_gemm_custom_gemv.h (CONV_2D with one output pixel),
/// ruy's AVX2 kernel (ruy/kernel_avx2_fma.cc: CONV_2D and FULLY_CONNECTED otherwise) and
/// optimized_ops Quantize (DEPTHWISE_CONV_2D, channels in blocks of 8): shift left by
/// max(shift, 0); vqrdmulh, i.e. (a·m + 2^30) >> 31, ties rounded up; then a rounding
/// right shift by max(−shift, 0), ties rounded up again.
/// Precondition (planner): −31 ≤ shift ≤ 30 and m ≥ 0.
@inline(__always)
func multiplyByQuantizedMultiplierRoundingUp(_ x: Int32, _ m: Int32, _ shift: Int32) -> Int32 {
    let left = shift > 0 ? shift : 0
    let right = shift > 0 ? 0 : 0 &- shift
    let a = x &<< left
    let high = (Int64(a) &* Int64(m) &+ (1 << 30)) &>> 31
    if right == 0 { return Int32(truncatingIfNeeded: high) }
    return Int32(truncatingIfNeeded: (high &+ (Int64(1) &<< Int64(right &- 1))) &>> Int64(right))
}

/// common.h MultiplyByQuantizedMultiplier (TFLITE_SINGLE_ROUNDING off): gemmlowp's
/// SaturatingRoundingDoublingHighMul then RoundingDivideByPOT, both rounding ties away
/// from zero. Used for DEPTHWISE_CONV_2D's leftover channels (optimized_ops Quantize's
/// scalar tail). Same precondition.
@inline(__always)
func multiplyByQuantizedMultiplierReference(_ x: Int32, _ m: Int32, _ shift: Int32) -> Int32 {
    let left = shift > 0 ? shift : 0
    let right = shift > 0 ? 0 : 0 &- shift
    let a = x &* (Int32(1) &<< left)
    let high: Int64
    if a == Int32.min && m == Int32.min {
        high = Int64(Int32.max)
    } else {
        let ab = Int64(a) &* Int64(m)
        let nudge: Int64 = ab >= 0 ? (1 << 30) : (1 - (1 << 30))
        high = (ab &+ nudge) / (1 << 31)          // C division: toward zero
    }
    if right == 0 { return Int32(truncatingIfNeeded: high) }
    let mask = (Int64(1) << Int64(right)) &- 1
    let remainder = high & mask
    let threshold = (mask >> 1) &+ (high < 0 ? 1 : 0)
    return Int32(truncatingIfNeeded: (high >> Int64(right)) &+ (remainder > threshold ? 1 : 0))
}

// MARK: - Steps

/// CONV_2D and DEPTHWISE_CONV_2D, NHWC. Offsets are into the arena (activations) or the
/// constant block (filter, bias, multipliers, shifts; bias −1: none).
struct ConvParams {
    var input: Int
    var batches: Int
    var inH: Int
    var inW: Int
    var inC: Int
    var filter: Int
    var kH: Int
    var kW: Int
    var bias: Int
    var output: Int
    var outH: Int
    var outW: Int
    var outC: Int
    var strideH: Int
    var strideW: Int
    var dilationH: Int
    var dilationW: Int
    var padTop: Int
    var padLeft: Int
    var depthMultiplier: Int
    /// Output channels from here on are rescaled with the reference rounding.
    var referenceFrom: Int
    var inputOffset: Int32
    var outputOffset: Int32
    var activationMin: Int32
    var activationMax: Int32
    var multipliers: Int
    var shifts: Int
    /// Int32 filter sums: per (output channel, filter row) for CONV_2D, per channel over
    /// all taps for DEPTHWISE_CONV_2D.
    var filterSums: Int
    /// Arena offset of `outC` int32 accumulators (depthwise only).
    var scratch: Int
}

struct FullyConnectedParams {
    var input: Int
    var batches: Int
    var depth: Int
    var units: Int
    var filter: Int
    /// Int32 sum of each unit's weights.
    var filterSums: Int
    var bias: Int
    var output: Int
    var inputOffset: Int32
    var outputOffset: Int32
    var multiplier: Int32
    var shift: Int32
    var activationMin: Int32
    var activationMax: Int32
}

/// One planned operator. Offsets: arena for activations, constant block for constants,
/// the side table for span lists and slice parameters.
enum WakeStep {
    /// Arena to arena: RESHAPE, READ_VARIABLE, ASSIGN_VARIABLE.
    case copy(src: Int, dst: Int, count: Int)
    /// Constant block to arena: the init subgraph's ASSIGN_VARIABLEs.
    case copyConstant(src: Int, dst: Int, count: Int)
    case conv(ConvParams)
    case depthwise(ConvParams)
    case fullyConnected(FullyConnectedParams)
    /// LOGISTIC through its 256-entry table.
    case lookup(input: Int, output: Int, count: Int, table: Int)
    /// QUANTIZE between equal scales: q − zp_in + zp_out, clamped.
    case requantize(input: Int, output: Int, count: Int, delta: Int32, min: Int32, max: Int32)
    /// Table at `spans`: n, then n pairs (source, bytes per outer step); a source below 0
    /// is the constant at offset −1 − source.
    case concatenation(output: Int, outer: Int, spans: Int)
    /// Table at `spans`: n, then n pairs (destination, bytes per outer step).
    case splitV(input: Int, outer: Int, rowBytes: Int, spans: Int)
    /// Table at `params`: five axes of (start, count, step, input stride).
    case stridedSlice(input: Int, output: Int, params: Int)

    @inline(__always)
    func run(_ a: UnsafeMutableRawPointer, _ k: UnsafeRawPointer, _ t: UnsafePointer<Int>) {
        switch self {
        case let .copy(src, dst, count):
            (a + dst).copyMemory(from: a + src, byteCount: count)
        case let .copyConstant(src, dst, count):
            (a + dst).copyMemory(from: k + src, byteCount: count)
        case let .conv(p):
            convolution(p, a, k)
        case let .depthwise(p):
            depthwiseConvolution(p, a, k)
        case let .fullyConnected(p):
            runFullyConnected(p, a, k)
        case let .lookup(input, output, count, table):
            let src = (a + input).assumingMemoryBound(to: UInt8.self)
            let dst = (a + output).assumingMemoryBound(to: UInt8.self)
            let lut = (k + table).assumingMemoryBound(to: UInt8.self)
            for i in 0 ..< count { dst[i] = lut[Int(src[i])] }
        case let .requantize(input, output, count, delta, lo, hi):
            let src = (a + input).assumingMemoryBound(to: Int8.self)
            let dst = (a + output).assumingMemoryBound(to: UInt8.self)
            for i in 0 ..< count {
                let v = min(max(Int32(src[i]) &+ delta, lo), hi)
                dst[i] = UInt8(truncatingIfNeeded: v)
            }
        case let .concatenation(output, outer, spans):
            let n = t[spans]
            var dst = a + output
            for o in 0 ..< outer {
                for i in 0 ..< n {
                    let source = t[spans + 1 + 2 * i]
                    let bytes = t[spans + 2 + 2 * i]
                    let from = source >= 0 ? UnsafeRawPointer(a + source) : k + (-1 - source)
                    dst.copyMemory(from: from + o &* bytes, byteCount: bytes)
                    dst += bytes
                }
            }
        case let .splitV(input, outer, rowBytes, spans):
            let n = t[spans]
            for o in 0 ..< outer {
                var src = a + input + o &* rowBytes
                for i in 0 ..< n {
                    let dst = t[spans + 1 + 2 * i]
                    let bytes = t[spans + 2 + 2 * i]
                    (a + dst + o &* bytes).copyMemory(from: src, byteCount: bytes)
                    src += bytes
                }
            }
        case let .stridedSlice(input, output, params):
            runStridedSlice(a + input, a + output, t + params)
        }
    }
}

// MARK: - Kernels

/// Σ x[i] · w[i] in int32 (wrapping, as C's int sum does in practice). The input offset
/// (−zero point) is added separately as offset · Σ w, precomputed per filter row: the
/// same int32 value modulo 2^32, and a loop the compiler vectorises well.
@inline(__always)
func dot(_ x: UnsafePointer<Int8>, _ w: UnsafePointer<Int8>, _ n: Int) -> Int32 {
    var acc: Int32 = 0
    for i in 0 ..< n {
        acc = acc &+ Int32(x[i]) &* Int32(w[i])
    }
    return acc
}

/// Σ (x[i] + offset) · w[i], for filter rows cut by padding.
@inline(__always)
func dot(_ x: UnsafePointer<Int8>, _ w: UnsafePointer<Int8>, _ n: Int, _ offset: Int32) -> Int32 {
    var acc: Int32 = 0
    for i in 0 ..< n {
        acc = acc &+ (Int32(x[i]) &+ offset) &* Int32(w[i])
    }
    return acc
}

@inline(__always)
func clampToByte(_ v: Int32, _ lo: Int32, _ hi: Int32) -> Int8 {
    Int8(truncatingIfNeeded: min(max(v, lo), hi))
}

/// conv.cc (optimized_integer_ops::ConvPerChannel): per output pixel and channel, the
/// filter window dotted with the input (pixels outside the input contribute nothing: the
/// im2col padding is the input zero point), plus bias, rescaled per channel.
@_optimize(speed)
func convolution(_ p: ConvParams, _ a: UnsafeMutableRawPointer, _ k: UnsafeRawPointer) {
    let input = UnsafePointer((a + p.input).assumingMemoryBound(to: Int8.self))
    let output = (a + p.output).assumingMemoryBound(to: Int8.self)
    let filter = (k + p.filter).assumingMemoryBound(to: Int8.self)
    let multipliers = (k + p.multipliers).assumingMemoryBound(to: Int32.self)
    let shifts = (k + p.shifts).assumingMemoryBound(to: Int32.self)
    let bias = p.bias >= 0 ? (k + p.bias).assumingMemoryBound(to: Int32.self) : nil
    let rowSums = (k + p.filterSums).assumingMemoryBound(to: Int32.self)
    let rowLength = p.kW &* p.inC
    let offset = p.inputOffset
    var out = 0
    for b in 0 ..< p.batches {
        for oy in 0 ..< p.outH {
            let y0 = oy &* p.strideH &- p.padTop
            for ox in 0 ..< p.outW {
                let x0 = ox &* p.strideW &- p.padLeft
                // Whole filter rows lie inside the input when width is not padded and
                // undilated (always so in these models): one dot product per row; and when
                // the filter spans the input's whole width, the window is one run.
                let rowInside = p.dilationW == 1 && x0 >= 0 && x0 &+ p.kW <= p.inW
                let windowRun = rowInside && p.kW == p.inW && p.dilationH == 1 && y0 >= 0 && y0 &+ p.kH <= p.inH
                for oc in 0 ..< p.outC {
                    var acc: Int32 = bias?[oc] ?? 0
                    if windowRun {
                        let window = input + ((b &* p.inH &+ y0) &* p.inW) &* p.inC
                        var sum: Int32 = 0
                        for ky in 0 ..< p.kH { sum = sum &+ rowSums[oc &* p.kH &+ ky] }
                        acc = acc &+ dot(window, filter + oc &* p.kH &* rowLength, p.kH &* rowLength) &+ offset &* sum
                    } else {
                        for ky in 0 ..< p.kH {
                            let y = y0 &+ ky &* p.dilationH
                            if y < 0 || y >= p.inH { continue }
                            let inRow = input + ((b &* p.inH &+ y) &* p.inW) &* p.inC
                            let wRow = filter + ((oc &* p.kH &+ ky) &* p.kW) &* p.inC
                            if rowInside {
                                acc = acc &+ dot(inRow + x0 &* p.inC, wRow, rowLength)
                                    &+ offset &* rowSums[oc &* p.kH &+ ky]
                                continue
                            }
                            for kx in 0 ..< p.kW {
                                let x = x0 &+ kx &* p.dilationW
                                if x < 0 || x >= p.inW { continue }
                                acc = acc &+ dot(inRow + x &* p.inC, wRow + kx &* p.inC, p.inC, offset)
                            }
                        }
                    }
                    let scaled = multiplyByQuantizedMultiplierRoundingUp(acc, multipliers[oc], shifts[oc])
                    output[out] = clampToByte(scaled &+ p.outputOffset, p.activationMin, p.activationMax)
                    out &+= 1
                }
            }
        }
    }
}

/// depthwise_conv.cc (optimized_integer_ops::DepthwiseConvPerChannel): output channel
/// ic·multiplier + m filters input channel ic alone. Per output pixel, all channels
/// accumulate together in the arena's int32 scratch (one filter tap at a time, so the
/// channel loop is contiguous), then each is rescaled.
@_optimize(speed)
func depthwiseConvolution(_ p: ConvParams, _ a: UnsafeMutableRawPointer, _ k: UnsafeRawPointer) {
    let input = UnsafePointer((a + p.input).assumingMemoryBound(to: Int8.self))
    let output = (a + p.output).assumingMemoryBound(to: Int8.self)
    let filter = (k + p.filter).assumingMemoryBound(to: Int8.self)
    let multipliers = (k + p.multipliers).assumingMemoryBound(to: Int32.self)
    let shifts = (k + p.shifts).assumingMemoryBound(to: Int32.self)
    let bias = p.bias >= 0 ? (k + p.bias).assumingMemoryBound(to: Int32.self) : nil
    let acc = (a + p.scratch).assumingMemoryBound(to: Int32.self)
    let tapSums = (k + p.filterSums).assumingMemoryBound(to: Int32.self)
    let offset = p.inputOffset
    let channels = p.outC
    let spanH = (p.kH &- 1) &* p.dilationH
    let spanW = (p.kW &- 1) &* p.dilationW
    var out = output
    for b in 0 ..< p.batches {
        for oy in 0 ..< p.outH {
            let y0 = oy &* p.strideH &- p.padTop
            for ox in 0 ..< p.outW {
                let x0 = ox &* p.strideW &- p.padLeft
                if let bias {
                    acc.update(from: bias, count: channels)
                } else {
                    acc.update(repeating: 0, count: channels)
                }
                // A window wholly inside the input takes the offset as offset · Σ taps;
                // one cut by padding adds it tap by tap.
                let inside = y0 >= 0 && y0 &+ spanH < p.inH && x0 >= 0 && x0 &+ spanW < p.inW
                let tapOffset: Int32 = inside ? 0 : offset
                if inside {
                    for c in 0 ..< channels { acc[c] = acc[c] &+ offset &* tapSums[c] }
                }
                for ky in 0 ..< p.kH {
                    let y = y0 &+ ky &* p.dilationH
                    if y < 0 || y >= p.inH { continue }
                    for kx in 0 ..< p.kW {
                        let x = x0 &+ kx &* p.dilationW
                        if x < 0 || x >= p.inW { continue }
                        let pixel = input + ((b &* p.inH &+ y) &* p.inW &+ x) &* p.inC
                        let tap = filter + (ky &* p.kW &+ kx) &* channels
                        if p.depthMultiplier == 1 {
                            for c in 0 ..< channels {
                                acc[c] = acc[c] &+ (Int32(pixel[c]) &+ tapOffset) &* Int32(tap[c])
                            }
                        } else {
                            var oc = 0
                            for ic in 0 ..< p.inC {
                                let v = Int32(pixel[ic]) &+ tapOffset
                                for _ in 0 ..< p.depthMultiplier {
                                    acc[oc] = acc[oc] &+ v &* Int32(tap[oc])
                                    oc &+= 1
                                }
                            }
                        }
                    }
                }
                for c in 0 ..< channels {
                    let scaled = c < p.referenceFrom
                        ? multiplyByQuantizedMultiplierRoundingUp(acc[c], multipliers[c], shifts[c])
                        : multiplyByQuantizedMultiplierReference(acc[c], multipliers[c], shifts[c])
                    out[c] = clampToByte(scaled &+ p.outputOffset, p.activationMin, p.activationMax)
                }
                out += channels
            }
        }
    }
}

/// fully_connected.cc (optimized_integer_ops::FullyConnected, through ruy): each unit's
/// weight row dotted with each batch row, plus bias, one rescaling.
@_optimize(speed)
func runFullyConnected(_ p: FullyConnectedParams, _ a: UnsafeMutableRawPointer, _ k: UnsafeRawPointer) {
    let input = UnsafePointer((a + p.input).assumingMemoryBound(to: Int8.self))
    let output = (a + p.output).assumingMemoryBound(to: Int8.self)
    let filter = (k + p.filter).assumingMemoryBound(to: Int8.self)
    let bias = p.bias >= 0 ? (k + p.bias).assumingMemoryBound(to: Int32.self) : nil
    let sums = (k + p.filterSums).assumingMemoryBound(to: Int32.self)
    var out = 0
    for b in 0 ..< p.batches {
        let row = input + b &* p.depth
        for u in 0 ..< p.units {
            var acc: Int32 = bias?[u] ?? 0
            acc = acc &+ dot(row, filter + u &* p.depth, p.depth) &+ p.inputOffset &* sums[u]
            let scaled = multiplyByQuantizedMultiplierRoundingUp(acc, p.multiplier, p.shift)
            output[out] = clampToByte(scaled &+ p.outputOffset, p.activationMin, p.activationMax)
            out &+= 1
        }
    }
}

/// strided_slice.cc over five axes; the innermost axis (input stride 1) is copied as one
/// block when its step is 1.
@_optimize(speed)
func runStridedSlice(_ input: UnsafeMutableRawPointer, _ output: UnsafeMutableRawPointer, _ q: UnsafePointer<Int>) {
    let src = UnsafePointer(input.assumingMemoryBound(to: Int8.self))
    var dst = output.assumingMemoryBound(to: Int8.self)
    for i0 in 0 ..< q[1] {
        let p0 = (q[0] &+ i0 &* q[2]) &* q[3]
        for i1 in 0 ..< q[5] {
            let p1 = p0 &+ (q[4] &+ i1 &* q[6]) &* q[7]
            for i2 in 0 ..< q[9] {
                let p2 = p1 &+ (q[8] &+ i2 &* q[10]) &* q[11]
                for i3 in 0 ..< q[13] {
                    let p3 = p2 &+ (q[12] &+ i3 &* q[14]) &* q[15]
                    if q[18] == 1 {
                        dst.update(from: src + (p3 &+ q[16]), count: q[17])
                        dst += q[17]
                    } else {
                        for i4 in 0 ..< q[17] {
                            dst.pointee = src[p3 &+ q[16] &+ i4 &* q[18]]
                            dst += 1
                        }
                    }
                }
            }
        }
    }
}

// MARK: - LOGISTIC's table

/// activations.cc SigmoidPrepare (kGenericOptimized, the resolver's LOGISTIC) fills a
/// 256-entry table with common.h LUTPopulateInt8, in float throughout:
/// dequantized = input_scale · (q − zp_in); transformed = 1 / (1 + expf(−dequantized));
/// out = clamp((int)(std::round(transformed · (1 / output_scale)) + zp_out)).
/// Indexed by the input byte's bit pattern.
func logisticTable(inputScale: Float, inputZeroPoint: Int32, outputScale: Float,
                   outputZeroPoint: Int32) -> [Int8] {
    var lut = [Int8](repeating: 0, count: 256)
    let inverseScale: Float = 1 / outputScale
    for value in -128 ... 127 {
        let dequantized = inputScale * Float(Int32(value) - inputZeroPoint)
        let transformed: Float = 1 / (1 + WakeMath.expf(-dequantized))
        let rescaled = (transformed * inverseScale).rounded(.toNearestOrAwayFromZero)
        let sum = rescaled + Float(outputZeroPoint)
        let q: Int32 = sum.isNaN ? 0 : (sum <= -128 ? -128 : (sum >= 127 ? 127 : Int32(sum)))
        lut[Int(UInt8(bitPattern: Int8(value)))] = Int8(q)
    }
    return lut
}

/// expf without libm: e^x in double precision (Cody–Waite reduction by ln 2, Taylor
/// series to degree 14, error a few double ulps), rounded once to float. That is the
/// correctly rounded expf except within ~1e-16 of a float rounding boundary, where
/// glibc's expf (< 0.502 ulp) could also go either way.
enum WakeMath {
    static func expf(_ x: Float) -> Float {
        Float(exp(Double(x)))
    }

    static func exp(_ x: Double) -> Double {
        if x.isNaN { return x }
        if x > 710 { return .infinity }
        if x < -746 { return 0 }
        let ln2Hi = 6.93147180369123816490e-01    // ln 2's upper bits (k·ln2Hi exact)
        let ln2Lo = 1.90821492927058770002e-10
        let k = (x * 1.44269504088896338700).rounded(.toNearestOrEven)
        let r = (x - k * ln2Hi) - k * ln2Lo          // |r| ≤ 0.35
        var p = 1.0 / 87178291200.0                  // 1/14!
        p = p * r + 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        // 2^k in two factors so neither over- nor underflows on its own.
        let n = Int(k)
        let half = n / 2
        return p * Double(sign: .plus, exponent: half, significand: 1) * Double(sign: .plus, exponent: n - half, significand: 1)
    }
}
