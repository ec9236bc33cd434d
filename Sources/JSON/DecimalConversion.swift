/// Decimal digits × 10^exponent → the nearest `Double` (ties to even) and, when the
/// value is an integer that fits, the exact `Int64`.
///
/// Why our own: `Double(String)` calls the C library's `strtod`, which Embedded Swift's
/// standard library does not provide. Method:
/// - Clinger's fast path (1990): up to 15 significant digits and |exponent| ≤ 22 — the
///   digits and the power of ten are both exact doubles, so one IEEE multiply or divide
///   rounds correctly.
/// - Otherwise exact big-integer arithmetic: for a non-negative exponent, the integer
///   digits·10^e itself; for a negative one, the 62–63-bit quotient digits·2^s / 10^-e
///   with the remainder as a sticky bit. The top bits are then rounded once.
/// - Digits past the 800th only matter as "something nonzero follows": a midpoint
///   between two doubles has at most 768 significant digits, so replacing the tail by a
///   single 1 cannot move the value across one.
enum DecimalConversion {
    static let maxDigits = 800

    /// Exact powers of ten as doubles (10^22 is the largest exact one).
    static let powersOfTen: [Double] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ]

    /// `digits` are values 0…9, most significant first, no leading or trailing zeros
    /// (empty means zero). Returns nil when the magnitude overflows `Double`.
    static func number(digits: [UInt8], exponent: Int, negative: Bool) -> JSONNumber? {
        if digits.isEmpty {
            return JSONNumber(int64: 0, double: negative ? -0.0 : 0.0)
        }
        guard let magnitude = double(digits: digits, exponent: exponent) else { return nil }
        return JSONNumber(int64: exactInteger(digits: digits, exponent: exponent, negative: negative),
                          double: negative ? -magnitude : magnitude)
    }

    static func exactInteger(digits: [UInt8], exponent: Int, negative: Bool) -> Int64? {
        guard exponent >= 0, digits.count &+ exponent <= 19 else { return nil }
        var v: UInt64 = 0
        for d in digits { v = v &* 10 &+ UInt64(d) }          // ≤ 19 digits: no overflow
        for _ in 0..<exponent {
            let (m, o) = v.multipliedReportingOverflow(by: 10)
            if o { return nil }
            v = m
        }
        if negative {
            if v <= 1 << 63 { return Int64(truncatingIfNeeded: 0 &- v) }
            return nil
        }
        return v <= UInt64(Int64.max) ? Int64(v) : nil
    }

    /// The magnitude, correctly rounded; nil on overflow.
    static func double(digits: [UInt8], exponent: Int) -> Double? {
        let n = digits.count
        // The value lies in [10^(n+e-1), 10^(n+e)).
        if n &+ exponent &- 1 > 308 { return nil }          // ≥ 1e309 > Double.greatestFiniteMagnitude
        if n &+ exponent < -324 { return 0 }                // < 1e-325: below half the least subnormal
        if n <= 15 && exponent >= -22 && exponent <= 22 {
            var m: UInt64 = 0
            for d in digits { m = m &* 10 &+ UInt64(d) }
            let x = Double(m)                               // exact: m < 10^15 < 2^53
            return exponent >= 0 ? x * powersOfTen[exponent] : x / powersOfTen[0 &- exponent]
        }
        var ds = digits
        var e = exponent
        if n > maxDigits {
            let tailNonZero = digits[maxDigits...].contains { $0 != 0 }
            ds = Array(digits[0..<maxDigits])
            e &+= n &- maxDigits
            if tailNonZero {
                ds.append(1)
                e &-= 1
            }
        }
        var d = BigUInt(decimalDigits: ds)
        if e >= 0 {
            d.multiply(byPowerOfTen: e)
            let (top, shift, sticky) = d.top64()
            return round(top, binaryExponent: shift, sticky: sticky)
        }
        // value = D / 10^m: scale so the quotient has 62 or 63 bits.
        var s = BigUInt(1)
        s.multiply(byPowerOfTen: 0 &- e)
        let scale = 62 &+ s.bitLength &- d.bitLength
        if scale >= 0 {
            d.shiftLeft(scale)
        } else {
            s.shiftLeft(0 &- scale)
        }
        let (q, remainderNonZero) = d.divide(by: s)
        return round(q, binaryExponent: 0 &- scale, sticky: remainderNonZero)
    }

    /// Rounds q·2^e2 (plus "a little more" when `sticky`) to the nearest double, ties to
    /// even; nil on overflow. Handles subnormals: the last kept bit is never below 2^-1074.
    static func round(_ q: UInt64, binaryExponent e2: Int, sticky: Bool) -> Double? {
        if q == 0 { return 0 }
        let bitLength = 64 &- q.leadingZeroBitCount
        let top = e2 &+ bitLength &- 1                      // exponent of the leading bit
        if top > 1023 { return nil }
        // Weight of the result's least significant bit.
        let unit = max(top &- 52, -1074)
        let shift = unit &- e2
        var mantissa: UInt64
        if shift <= 0 {
            mantissa = q << UInt64(0 &- shift)              // exact; q has ≤ 53 bits here
        } else if shift > 64 {
            mantissa = 0                                    // below half a unit: rounds to 0
        } else {
            mantissa = shift == 64 ? 0 : q >> UInt64(shift)
            let rest = shift == 64 ? q : q & ((1 << UInt64(shift)) &- 1)
            let half: UInt64 = 1 << UInt64(shift &- 1)
            if rest > half || (rest == half && (sticky || mantissa & 1 == 1)) {
                mantissa &+= 1
            }
        }
        var u = unit
        if mantissa == 1 << 53 {                             // rounding carried into a new bit
            mantissa >>= 1
            u &+= 1
        }
        if mantissa < 1 << 52 {
            // Subnormal (u == -1074) or zero: the bit pattern is the mantissa itself.
            return Double(bitPattern: mantissa)
        }
        let biased = u &+ 52 &+ 1023
        if biased >= 2047 { return nil }
        return Double(bitPattern: UInt64(biased) << 52 | (mantissa & ((1 << 52) &- 1)))
    }
}

/// A non-negative integer in 32-bit limbs, least significant first: only what the
/// conversion needs (multiply by small numbers, shift, compare, subtract).
struct BigUInt {
    var limbs: [UInt32]

    init(_ v: UInt32) { limbs = v == 0 ? [] : [v] }

    init(decimalDigits: [UInt8]) {
        limbs = []
        var i = 0
        while i < decimalDigits.count {
            let end = min(i &+ 9, decimalDigits.count)
            var chunk: UInt32 = 0, scale: UInt32 = 1
            for k in i..<end {
                chunk = chunk &* 10 &+ UInt32(decimalDigits[k])
                scale &*= 10
            }
            multiply(by: scale, adding: chunk)
            i = end
        }
    }

    mutating func multiply(by m: UInt32, adding a: UInt32 = 0) {
        var carry = UInt64(a)
        for i in 0..<limbs.count {
            let p = UInt64(limbs[i]) &* UInt64(m) &+ carry
            limbs[i] = UInt32(truncatingIfNeeded: p)
            carry = p >> 32
        }
        if carry != 0 { limbs.append(UInt32(carry)) }
    }

    mutating func multiply(byPowerOfTen k: Int) {
        var k = k
        while k >= 9 {
            multiply(by: 1_000_000_000)
            k &-= 9
        }
        var m: UInt32 = 1
        for _ in 0..<k { m &*= 10 }
        if m > 1 { multiply(by: m) }
    }

    var bitLength: Int {
        guard let last = limbs.last else { return 0 }
        return (limbs.count &- 1) &* 32 &+ (32 &- last.leadingZeroBitCount)
    }

    func bit(_ i: Int) -> Bool {
        let limb = i >> 5
        return limb < limbs.count && (limbs[limb] >> UInt32(i & 31)) & 1 == 1
    }

    mutating func shiftLeft(_ n: Int) {
        guard n > 0, !limbs.isEmpty else { return }
        let whole = n >> 5, part = UInt32(n & 31)
        if part != 0 {
            var carry: UInt32 = 0
            for i in 0..<limbs.count {
                let v = limbs[i]
                limbs[i] = v << part | carry
                carry = v >> (32 &- part)
            }
            if carry != 0 { limbs.append(carry) }
        }
        if whole > 0 { limbs.insert(contentsOf: [UInt32](repeating: 0, count: whole), at: 0) }
    }

    mutating func shiftRightOne() {
        var carry: UInt32 = 0
        for i in stride(from: limbs.count &- 1, through: 0, by: -1) {
            let v = limbs[i]
            limbs[i] = v >> 1 | carry
            carry = v << 31
        }
        while let last = limbs.last, last == 0 { limbs.removeLast() }
    }

    static func compare(_ a: BigUInt, _ b: BigUInt) -> Int {
        if a.limbs.count != b.limbs.count { return a.limbs.count < b.limbs.count ? -1 : 1 }
        for i in stride(from: a.limbs.count &- 1, through: 0, by: -1) where a.limbs[i] != b.limbs[i] {
            return a.limbs[i] < b.limbs[i] ? -1 : 1
        }
        return 0
    }

    /// self -= b, where b ≤ self.
    mutating func subtract(_ b: BigUInt) {
        var borrow: UInt64 = 0
        for i in 0..<limbs.count {
            let bv = i < b.limbs.count ? UInt64(b.limbs[i]) : 0
            let (d1, o1) = UInt64(limbs[i]).subtractingReportingOverflow(bv &+ borrow)
            limbs[i] = UInt32(truncatingIfNeeded: d1)
            borrow = o1 ? 1 : 0
        }
        while let last = limbs.last, last == 0 { limbs.removeLast() }
    }

    /// The top 64 bits, how far they are shifted down, and whether any lower bit is set.
    func top64() -> (UInt64, Int, Bool) {
        let length = bitLength
        if length <= 64 {
            var v: UInt64 = 0
            for i in stride(from: limbs.count &- 1, through: 0, by: -1) { v = v << 32 | UInt64(limbs[i]) }
            return (v, 0, false)
        }
        let shift = length &- 64
        var v: UInt64 = 0
        for i in stride(from: length &- 1, through: shift, by: -1) { v = v << 1 | (bit(i) ? 1 : 0) }
        var sticky = false
        for i in 0..<shift where bit(i) {
            sticky = true
            break
        }
        return (v, shift, sticky)
    }

    /// floor(self / d) (which the caller guarantees is below 2^64), and whether the
    /// remainder is nonzero. Restoring binary long division over the quotient's bits.
    func divide(by d: BigUInt) -> (UInt64, Bool) {
        var r = self
        var t = d
        t.shiftLeft(63)
        var q: UInt64 = 0
        for i in stride(from: 63, through: 0, by: -1) {
            if BigUInt.compare(r, t) >= 0 {
                r.subtract(t)
                q |= 1 << UInt64(i)
            }
            t.shiftRightOne()
        }
        return (q, !r.limbs.isEmpty)
    }
}
