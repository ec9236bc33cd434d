/// Double-precision elementary functions for configuration time (coefficients, tables,
/// meter readings). Embedded Swift has no libm import in pure modules, and these run
/// only off the hot path, so plain series with range reduction are enough: they agree
/// with libm to about 1e-15 relative over the ranges used here (checked in the tests).
enum ConfigMath {
    static let ln2 = 0.693147180559945309417232121458
    static let ln10 = 2.30258509299404568401799145468
    static let pi = 3.14159265358979323846264338328

    /// 2^k for an integer k in the normal range.
    static func pow2(_ k: Int) -> Double {
        if k > 1023 { return .infinity }
        if k < -1074 { return 0 }
        if k < -1022 { return Double(sign: .plus, exponent: -1022, significand: 1) * Double(sign: .plus, exponent: k + 1022, significand: 1) }
        return Double(sign: .plus, exponent: k, significand: 1)
    }

    static func exp(_ x: Double) -> Double {
        if x.isNaN { return x }
        if x > 709.78 { return .infinity }
        if x < -745.2 { return 0 }
        // x = k·ln2 + r, |r| ≤ ln2/2; e^r by Taylor series (converges to 1 ulp by n = 18).
        let k = (x / ln2).rounded()
        let r = x - k * ln2
        var term = 1.0
        var sum = 1.0
        var n = 1.0
        while n < 24 {
            term *= r / n
            sum += term
            n += 1
        }
        return sum * pow2(Int(k))
    }

    /// Natural logarithm; −∞ for 0, NaN for negative input.
    static func log(_ x: Double) -> Double {
        if x.isNaN || x < 0 { return .nan }
        if x == 0 { return -.infinity }
        if x.isInfinite { return x }
        var e = Int(x.exponent)
        var m = x.significand // [1, 2)
        if m > 1.4142135623730951 { m /= 2; e += 1 }
        // ln m = 2·atanh(s), s = (m−1)/(m+1), |s| ≤ 0.172.
        let s = (m - 1) / (m + 1)
        let s2 = s * s
        var term = s
        var sum = 0.0
        var n = 1.0
        while n < 40 {
            sum += term / n
            term *= s2
            n += 2
        }
        return 2 * sum + Double(e) * ln2
    }

    static func log10(_ x: Double) -> Double { log(x) / ln10 }
    static func pow10(_ x: Double) -> Double { exp(x * ln10) }

    /// Amplitude ratio of a level in decibels.
    static func dbToLinear(_ db: Double) -> Double { pow10(db / 20) }
    /// Decibels of an amplitude ratio (−∞ for 0).
    static func linearToDB(_ ratio: Double) -> Double { 20 * log10(ratio) }

    static func sin(_ x: Double) -> Double {
        let r = reduce(x)
        var term = r
        var sum = r
        let r2 = r * r
        var n = 1.0
        while n < 30 {
            term *= -r2 / ((n + 1) * (n + 2))
            sum += term
            n += 2
        }
        return sum
    }

    static func cos(_ x: Double) -> Double {
        let r = reduce(x)
        var term = 1.0
        var sum = 1.0
        let r2 = r * r
        var n = 0.0
        while n < 30 {
            term *= -r2 / ((n + 1) * (n + 2))
            sum += term
            n += 2
        }
        return sum
    }

    static func tan(_ x: Double) -> Double { sin(x) / cos(x) }

    /// x reduced to [−π, π] (arguments here are at most a few thousand radians).
    private static func reduce(_ x: Double) -> Double {
        let twoPi = 2 * pi
        return x - (x / twoPi).rounded() * twoPi
    }

    /// Modified Bessel function of the first kind, order 0 (Kaiser window).
    static func besselI0(_ x: Double) -> Double {
        var sum = 1.0
        var term = 1.0
        let q = x * x / 4
        var k = 1.0
        while k < 200 {
            term *= q / (k * k)
            sum += term
            if term < sum * 1e-17 { break }
            k += 1
        }
        return sum
    }

    /// 1 − e^(−frame/τ): the per-frame coefficient of a one-pole smoother with time
    /// constant `tauMilliseconds`, run once per `frameMilliseconds`.
    static func onePole(tauMilliseconds: Double, frameMilliseconds: Double) -> Double {
        if tauMilliseconds <= 0 { return 1 }
        return 1 - exp(-frameMilliseconds / tauMilliseconds)
    }
}
