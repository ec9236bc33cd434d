/// A JSON number, as both an exact integer (when it is one) and a `Double`.
///
/// `int64` is set when the literal's exact decimal value is an integer that fits in
/// `Int64` (`500`, `-7`, `5e2`, `1.0`); `double` is always the correctly rounded binary
/// value. So `9007199254740993` keeps its last digit in `int64` while `double` is
/// 9007199254740992, and `-0` has `int64 == 0` and `double == -0.0`.
public struct JSONNumber: Equatable, Sendable, CustomStringConvertible {
    /// The exact value when it is an integer in `Int64` range, else nil.
    public let int64: Int64?
    /// The value rounded to the nearest `Double` (ties to even).
    public let double: Double

    /// An integer (exact).
    public init(_ value: Int64) {
        int64 = value
        double = Double(value)
    }

    public init(_ value: Int) { self.init(Int64(value)) }

    /// A double; when it is integral and in `Int64` range `int64` is set too, as the
    /// parser would for the same value. NaN and infinities serialize as `null`.
    public init(_ value: Double) {
        double = value
        int64 = JSONNumber.exactInt64(value)
    }

    /// Used by the parser, which computed both views from the decimal digits.
    init(int64: Int64?, double: Double) {
        self.int64 = int64
        self.double = double
    }

    static func exactInt64(_ d: Double) -> Int64? {
        // -2^63 is exact in Double; 2^63 is the first value out of range.
        guard d.isFinite, d >= -9_223_372_036_854_775_808.0, d < 9_223_372_036_854_775_808.0,
              d.rounded(.towardZero) == d else { return nil }
        return Int64(d)
    }

    /// Equal when both views are equal; `-0` and `0` differ (their doubles' signs do).
    public static func == (a: JSONNumber, b: JSONNumber) -> Bool {
        guard a.int64 == b.int64 else { return false }
        if a.double.isNaN && b.double.isNaN { return true }
        return a.double == b.double && a.double.sign == b.double.sign
    }

    /// The compact JSON text of the number.
    public var description: String {
        var out: [UInt8] = []
        JSONSerializer.appendNumber(self, to: &out)
        return String(decoding: out, as: UTF8.self)
    }
}

/// An object: members in the order they were parsed or added.
///
/// Lookup is a linear scan (objects in signaling and events have a handful of members);
/// the parser has already removed duplicate names (last value wins).
public struct JSONObject: Equatable, Sendable, Sequence {
    public typealias Member = (key: String, value: JSONValue)
    public var members: [Member]

    public init() { members = [] }
    public init(_ members: [Member]) { self.members = members }

    public var count: Int { members.count }
    public var isEmpty: Bool { members.isEmpty }
    public var keys: [String] { members.map { $0.key } }

    public func makeIterator() -> IndexingIterator<[Member]> { members.makeIterator() }

    /// The value of the member named `key`; setting replaces it in place or appends,
    /// setting nil removes it.
    public subscript(key: String) -> JSONValue? {
        get {
            for m in members where JSONObject.sameName(m.key, key) { return m.value }
            return nil
        }
        set {
            let index = members.firstIndex { JSONObject.sameName($0.key, key) }
            switch (index, newValue) {
            case (let i?, let v?): members[i].value = v
            case (let i?, nil): members.remove(at: i)
            case (nil, let v?): members.append((key, v))
            case (nil, nil): break
            }
        }
    }

    /// Names compare by code points (RFC 8259 §8.3), not canonical equivalence.
    static func sameName(_ a: String, _ b: String) -> Bool {
        a.utf8.elementsEqual(b.utf8)
    }

    /// Order matters: objects are equal when they have the same members in the same order.
    public static func == (a: JSONObject, b: JSONObject) -> Bool {
        guard a.members.count == b.members.count else { return false }
        for i in 0..<a.members.count {
            guard sameName(a.members[i].key, b.members[i].key),
                  a.members[i].value == b.members[i].value else { return false }
        }
        return true
    }
}

/// A JSON value (RFC 8259 §3).
///
/// Read with optional chaining: `event["type"]?.string`, `event["item"]?["content"]?[0]`.
/// Build with literals: `let e: JSONValue = ["type": "response.create"]`.
public enum JSONValue: Equatable, Sendable {
    case null
    case bool(Bool)
    case number(JSONNumber)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The member `key` of an object; nil for a missing member or a non-object.
    public subscript(key: String) -> JSONValue? {
        get {
            guard case .object(let o) = self else { return nil }
            return o[key]
        }
        set {
            guard case .object(var o) = self else { return }
            o[key] = newValue
            self = .object(o)
        }
    }

    /// Element `index` of an array; nil when out of range or not an array.
    public subscript(index: Int) -> JSONValue? {
        guard case .array(let a) = self, index >= 0, index < a.count else { return nil }
        return a[index]
    }

    public var isNull: Bool { if case .null = self { return true } else { return false } }

    public var bool: Bool? { if case .bool(let b) = self { return b } else { return nil } }

    public var string: String? { if case .string(let s) = self { return s } else { return nil } }

    public var number: JSONNumber? { if case .number(let n) = self { return n } else { return nil } }

    /// The exact integer value; nil for non-integers, out-of-range and non-numbers.
    public var int64: Int64? { number?.int64 }

    /// The exact integer value as `Int`; nil when it does not fit.
    public var int: Int? {
        guard let v = int64 else { return nil }
        return Int(exactly: v)
    }

    /// Any number, rounded to `Double`.
    public var double: Double? { number?.double }

    public var array: [JSONValue]? { if case .array(let a) = self { return a } else { return nil } }

    public var object: JSONObject? { if case .object(let o) = self { return o } else { return nil } }

    /// Strings compare by code units (RFC 8259 §8.3), like member names, not by
    /// canonical equivalence; the rest as the derived `==` would.
    public static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case (.bool(let x), .bool(let y)): return x == y
        case (.number(let x), .number(let y)): return x == y
        case (.string(let x), .string(let y)): return JSONObject.sameName(x, y)
        case (.array(let x), .array(let y)): return x == y
        case (.object(let x), .object(let y)): return x == y
        default: return false
        }
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByStringInterpolation,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .number(JSONNumber(value)) }
    public init(floatLiteral value: Double) { self = .number(JSONNumber(value)) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(stringInterpolation: DefaultStringInterpolation) {
        self = .string(String(stringInterpolation: stringInterpolation))
    }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// Members keep the literal's order; a repeated key keeps its last value.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        var o = JSONObject()
        for (k, v) in elements { o[k] = v }
        self = .object(o)
    }

    public init(_ value: Int) { self = .number(JSONNumber(value)) }
    public init(_ value: Int64) { self = .number(JSONNumber(value)) }
    public init(_ value: Double) { self = .number(JSONNumber(value)) }
    public init(_ value: String) { self = .string(value) }
    public init(_ value: Bool) { self = .bool(value) }
}

extension JSONValue: CustomStringConvertible {
    /// Compact JSON text.
    public var description: String { serializedString() }
}
