// Decimal → Double conversion checked against two independent facts: the C library's
// strtod (through full Swift's `Double(String)`), and exact decimal expansions of the
// midpoints between adjacent doubles, computed here with schoolbook decimal arithmetic.
import Testing
import JSON
import Wire

func parseNumber(_ s: String) throws -> JSONNumber {
    try #require(try JSONValue.parse(Array(s.utf8)).number)
}

/// Exact decimal digits of small·5^k·2^j (test-side, base 10^9 limbs, least first).
func decimalDigits(of value: UInt64, timesFivePow k: Int, timesTwoPow j: Int) -> String {
    var limbs: [UInt64] = [value % 1_000_000_000, value / 1_000_000_000 % 1_000_000_000, value / 1_000_000_000_000_000_000]
    func mul(_ m: UInt64) {
        var carry: UInt64 = 0
        for i in 0..<limbs.count {
            let p = limbs[i] * m + carry
            limbs[i] = p % 1_000_000_000
            carry = p / 1_000_000_000
        }
        while carry > 0 { limbs.append(carry % 1_000_000_000); carry /= 1_000_000_000 }
    }
    for _ in 0..<k { mul(5) }
    for _ in 0..<j { mul(2) }
    while limbs.count > 1 && limbs.last == 0 { limbs.removeLast() }
    var s = String(limbs.last!)
    for limb in limbs.dropLast().reversed() {
        let t = String(limb)
        s += String(repeating: "0", count: 9 - t.count) + t
    }
    return s
}

@Test func knownHardCases() throws {
    let cases: [(String, Double)] = [
        ("1e23", 1e23),                                   // 9.999999999999999e22 after rounding
        ("8.98846567431158e307", 8.98846567431158e307),
        ("2.2250738585072011e-308", Double(bitPattern: 0x000F_FFFF_FFFF_FFFF)), // largest subnormal
        ("2.2250738585072012e-308", 2.2250738585072014e-308),
        ("2.2250738585072014e-308", Double.leastNormalMagnitude),
        ("4.9406564584124654e-324", Double.leastNonzeroMagnitude),
        ("2.4703282292062328e-324", Double.leastNonzeroMagnitude), // just above half: rounds up
        ("2.4703282292062327e-324", 0),                            // just below half: rounds down
        ("1.7976931348623157e308", Double.greatestFiniteMagnitude),
        ("0.1", 0.1), ("0.2", 0.2), ("0.3", 0.3),
        ("123456789012345678901234567890", 1.2345678901234568e29),
        ("9007199254740993", 9007199254740992),           // tie → even
        ("9007199254740995", 9007199254740996),           // tie → even
        ("9007199254740993.0000000000000000000001", 9007199254740994), // just past tie
        ("3.141592653589793238462643383279502884197169399375105820974944", Double.pi),
        ("1e-22", 1e-22), ("1e22", 1e22), ("1e-23", 1e-23),
        ("4.9406564584124654e-322", Double(bitPattern: 100)),
        ("7.2057594037927933e16", 72057594037927936),
    ]
    for (text, expected) in cases {
        let n = try parseNumber(text)
        #expect(n.double.bitPattern == expected.bitPattern, "\(text) → \(n.double), expected \(expected)")
        // And the C library agrees with the expectation (our table has no typo).
        #expect(Double(text)?.bitPattern == expected.bitPattern, "strtod disagrees on \(text)")
    }
}

@Test func exactIntegers() throws {
    #expect(try parseNumber("9007199254740993").int64 == 9_007_199_254_740_993)
    #expect(try parseNumber("-9223372036854775808").int64 == Int64.min)
    #expect(try parseNumber("1.5e1").int64 == 15)
    #expect(try parseNumber("5e2").int64 == 500)
    #expect(try parseNumber("1.000").int64 == 1)
    #expect(try parseNumber("1000e-3").int64 == 1)
    #expect(try parseNumber("1.5").int64 == nil)
    #expect(try parseNumber("1e19").int64 == nil)
    #expect(try parseNumber("9.223372036854775807e18").int64 == Int64.max)
    let mz = try parseNumber("-0")
    #expect(mz.int64 == 0 && mz.double == 0 && mz.double.sign == .minus)
    let mz2 = try parseNumber("-0.0e5")
    #expect(mz2.int64 == 0 && mz2.double.sign == .minus)
    #expect(try parseNumber("0").double.sign == .plus)
}

/// Random decimal strings of 1–40 digits over the whole exponent range, compared bit
/// for bit with strtod.
@Test func randomDecimalsMatchStrtod() throws {
    var rng = SeededRandom(seed: 0x4A53_4F4E)
    var checked = 0
    for _ in 0..<20_000 {
        let digitCount = Int.random(in: 1...40, using: &rng)
        var digits = String(Int.random(in: 1...9, using: &rng))
        for _ in 1..<digitCount { digits += String(Int.random(in: 0...9, using: &rng)) }
        let split = Int.random(in: 1...digitCount, using: &rng)
        let mantissa = split == digitCount ? digits
            : String(digits.prefix(split)) + "." + String(digits.dropFirst(split))
        let exponent = Int.random(in: -345...310, using: &rng)
        let text = (Bool.random(using: &rng) ? "-" : "") + mantissa + "e" + String(exponent)
        guard let reference = Double(text), reference.isFinite else {
            #expect(throws: JSONError.self) { try JSONValue.parse(Array(text.utf8)) }
            continue
        }
        let n = try parseNumber(text)
        #expect(n.double.bitPattern == reference.bitPattern, "\(text)")
        checked += 1
    }
    #expect(checked > 19_000)
}

/// Exact midpoints between random adjacent doubles (normal and subnormal): the midpoint
/// itself rounds to the even neighbour, a hair above to the upper one, a hair below to
/// the lower one.
@Test func midpointsRoundHalfToEven() throws {
    var rng = SeededRandom(seed: 7)
    for i in 0..<600 {
        // Every third one is subnormal.
        let bits = i % 3 == 0 ? UInt64.random(in: 1..<(1 << 52), using: &rng)
            : UInt64.random(in: (1 << 52)..<0x7FEF_FFFF_FFFF_FFFF, using: &rng)
        let low = Double(bitPattern: bits)
        let high = low.nextUp
        // low = m·2^e with m integral: midpoint = (2m+1)·2^(e-1).
        let m: UInt64, e: Int
        if low.exponentBitPattern == 0 {
            m = low.significandBitPattern; e = -1074
        } else {
            m = low.significandBitPattern | 1 << 52; e = Int(low.exponentBitPattern) - 1075
        }
        let twoMPlus1 = 2 * m + 1
        let even = m % 2 == 0 ? low : high
        if e - 1 >= 0 {
            // An integer midpoint: exact digits, then a hair above.
            let digits = decimalDigits(of: twoMPlus1, timesFivePow: 0, timesTwoPow: e - 1)
            #expect(try parseNumber(digits).double == even, "\(digits)")
            #expect(try parseNumber(digits + ".000000000000000000000000000001").double == high)
            #expect(Double(digits) == even)
            continue
        }
        // (2m+1)·2^(e-1) = (2m+1)·5^k / 10^k with k = 1-e.
        let k = 1 - e
        let digits = decimalDigits(of: twoMPlus1, timesFivePow: k, timesTwoPow: 0)
        let text = digits + "e-" + String(k)
        let above = digits + "0000000000001e-" + String(k + 13)
        // The digits end in 5 (odd times a power of five): lower the last one.
        let below = String(digits.dropLast()) + "4999999999999e-" + String(k + 12)
        #expect(try parseNumber(text).double == even, "midpoint \(text)")
        #expect(try parseNumber(above).double == high, "above \(above)")
        #expect(try parseNumber(below).double == low, "below \(below)")
        #expect(Double(text) == even)
    }
}

/// 2^-1075, half the least subnormal: 752 significant digits; a tie that goes to zero,
/// and with one more digit it goes up. Also digits far beyond the 800 we keep.
@Test func longMantissas() throws {
    let half = decimalDigits(of: 1, timesFivePow: 1075, timesTwoPow: 0)
    #expect(try parseNumber(half + "e-1075").double == 0)
    #expect(try parseNumber(half + "1e-1076").double == Double.leastNonzeroMagnitude)
    // 1 + 2^-53 (tie → 1.0), then the same followed by 2000 zeros and a 1 (→ nextUp).
    let tie = decimalDigits(of: (1 << 53) + 1, timesFivePow: 53, timesTwoPow: 0)
    #expect(try parseNumber(tie + "e-53").double == 1.0)
    let past = tie + String(repeating: "0", count: 2000) + "1e-2054"
    #expect(try parseNumber(past).double == 1.0.nextUp)
    #expect(try parseNumber(tie + String(repeating: "0", count: 2000) + "e-2053").double == 1.0)
    // A long integer with a fraction full of zeros.
    #expect(try parseNumber("1" + String(repeating: "0", count: 300) + "." + String(repeating: "0", count: 500)).double == 1e300)
}
