/// 48 kHz to the models' 16 kHz for the detector: a linear-phase low-pass FIR evaluated
/// only at every third input sample.
///
/// Why not Audio's `Resampler`: that one is general (any L/M, 144 taps a phase here,
/// 64-bit sums so 3× interpolation cannot overflow) and cost some 9 M instructions a
/// second of 48 kHz capture on arm64, more than the features and the model together.
/// Decimation by 3 needs one phase; the filter is symmetric, so each pair of samples
/// shares a tap; and with taps in Q14 whose magnitudes sum to under 2 (1.33 here) a
/// full-scale input stays under 2^31 in an `Int32` sum, which the compiler vectorises.
///
/// The filter: 96 taps of a Kaiser-windowed sinc (β = 8, stopband about −80 dB), cut
/// off at 7.2 kHz (0.45 of the 16 kHz rate, as `Resampler` does): flat to about
/// 6.4 kHz, at least −80 dB from 8.8 kHz, where it would fold back below 7.2 kHz. The
/// frontend's top mel channel (to 7.5 kHz) loses some of its highest part; the models
/// were trained on 16 kHz recordings whose own anti-alias filters did the same.
public final class WakeDecimator {
    public static let taps = 96
    static let half = taps / 2
    /// Input samples taken at most per call.
    public let maxInput: Int
    private let coefficients: UnsafeMutablePointer<Int32> // `half` taps, Q14, h[i] = h[taps − 1 − i]
    private let history: UnsafeMutablePointer<Int16>      // taps − 1 + maxInput
    private var fill = 0      // samples in history
    private var next = 0      // where the next output's window starts

    public init(maxInput: Int = 4800) {
        self.maxInput = maxInput
        coefficients = .allocate(capacity: WakeDecimator.half)
        history = .allocate(capacity: WakeDecimator.taps - 1 + maxInput)
        history.initialize(repeating: 0, count: WakeDecimator.taps - 1 + maxInput)
        // The window starts full of silence: the first output is one filter length in.
        fill = WakeDecimator.taps - 1
        let n = WakeDecimator.taps
        let fc = 7200.0 / 48_000.0
        let beta = 8.0
        let i0b = WakeDecimator.besselI0(beta)
        var sum = 0.0
        var h = [Double](repeating: 0, count: WakeDecimator.half)
        for i in 0..<WakeDecimator.half {
            let t = Double(i) - Double(n - 1) / 2
            let sinc = 2 * fc * (t == 0 ? 1 : InitMath.sin(2 * Double.pi * fc * t) / (2 * Double.pi * fc * t))
            let r = 2 * Double(i) / Double(n - 1) - 1
            let w = WakeDecimator.besselI0(beta * (1 - r * r).squareRoot()) / i0b
            h[i] = sinc * w
            sum += 2 * h[i]
        }
        // Unity gain at DC, in Q14.
        for i in 0..<WakeDecimator.half { coefficients[i] = Int32((h[i] / sum * 16384).rounded()) }
    }

    deinit {
        coefficients.deallocate()
        history.deallocate()
    }

    /// The zeroth-order modified Bessel function of the first kind (the Kaiser window's),
    /// by its power series; exact to double precision for the arguments used here.
    static func besselI0(_ x: Double) -> Double {
        var term = 1.0, sum = 1.0, k = 1.0
        while term > 1e-17 * sum {
            term *= (x / (2 * k)) * (x / (2 * k))
            sum += term
            k += 1
        }
        return sum
    }

    public func reset() {
        history.update(repeating: 0, count: WakeDecimator.taps - 1)
        fill = WakeDecimator.taps - 1
        next = 0
    }

    /// Takes `input` (at most `maxInput` samples; the rest is dropped) and writes the
    /// 16 kHz samples it completes, as many as `output` holds (`input.count / 3 + 1`
    /// is enough); returns how many.
    @_optimize(speed)
    public func process(_ input: UnsafeBufferPointer<Int16>, into output: UnsafeMutableBufferPointer<Int16>) -> Int {
        // What fits: at most `maxInput`, less when a too-small `output` left more kept.
        let count = min(input.count, WakeDecimator.taps - 1 + maxInput - fill)
        guard count > 0, let src = input.baseAddress else { return 0 }
        (history + fill).update(from: src, count: count)
        fill += count
        var o = 0
        let n = WakeDecimator.taps
        while next + n <= fill && o < output.count {
            let x = history + next
            var acc: Int32 = 0
            for i in 0..<WakeDecimator.half {
                acc &+= coefficients[i] &* (Int32(x[i]) &+ Int32(x[n - 1 - i]))
            }
            let r = (acc &+ 8192) &>> 14
            output[o] = Int16(truncatingIfNeeded: min(max(r, -32768), 32767))
            o += 1
            next += 3
        }
        // Keep what the next outputs still need.
        let keep = fill - next
        // Forward, onto itself: the destination is below the source.
        for i in 0..<keep { history[i] = history[next + i] }
        fill = keep
        next = 0
        return o
    }
}
