// Serializer output, parse → serialize → parse round trips, limits and big documents.
import Foundation
import Testing
import JSON
import Wire

@Test(arguments: acceptCases.map { $0.0 })
func acceptedDocumentsRoundTrip(name: String) throws {
    let (_, text, _) = try #require(acceptCases.first { $0.0 == name })
    let first = try JSONValue.parse(bytes(text))
    let out = first.serialized()
    let second = try JSONValue.parse(out)
    #expect(second == first, "\(name): \(String(decoding: out, as: UTF8.self))")
    #expect(second.serialized() == out, "serializing is a fixed point")
}

@Test func serializerKnownOutput() {
    let v: JSONValue = [
        "type": "session.update",
        "path": "a/b",
        "quote": "say \"hi\"\\",
        "controls": "\u{0}\u{1}\u{8}\u{9}\u{A}\u{C}\u{D}\u{1F}\u{7F}",
        "unicode": "é€😀\u{2028}",
        "n": [0, -1, 1.5, -0.0, 1e300, 0.1, .number(JSONNumber(Double.leastNonzeroMagnitude)), 9007199254740993, .number(JSONNumber(Int64.min))],
        "special": [.number(JSONNumber(Double.nan)), .number(JSONNumber(Double.infinity))],
        "flags": [true, false, nil],
        "empty": [:],
        "list": [],
    ]
    let expected = #"{"type":"session.update","path":"a/b","quote":"say \"hi\"\\","controls":"\u0000\u0001\b\t\n\f\r\u001f\#u{7F}","unicode":"é€😀\#u{2028}","n":[0,-1,1.5,-0,1e+300,0.1,5e-324,9007199254740993,-9223372036854775808],"special":[null,null],"flags":[true,false,null],"empty":{},"list":[]}"#
    #expect(v.serializedString() == expected)
    #expect(v.description == expected)
}

/// Our output read back by an independent parser (Foundation's JSONSerialization):
/// strings with every control character and non-BMP characters survive.
@Test func foundationReadsOurStrings() throws {
    var rng = SeededRandom(seed: 42)
    for _ in 0..<300 {
        let s = randomString(using: &rng)
        let doc = JSONValue.array([.string(s), .number(JSONNumber(Double(Int.random(in: -1000...1000, using: &rng)) / 8))])
        let parsed = try JSONSerialization.jsonObject(with: Data(doc.serialized())) as? [Any]
        #expect(parsed?.first as? String == s)
        #expect((parsed?.last as? NSNumber)?.doubleValue == doc[1]?.double)
    }
}

func randomString(using rng: inout SeededRandom) -> String {
    var scalars = String.UnicodeScalarView()
    for _ in 0..<Int.random(in: 0...24, using: &rng) {
        let pick = Int.random(in: 0..<6, using: &rng)
        let v: UInt32
        switch pick {
        case 0: v = UInt32.random(in: 0..<0x20, using: &rng)
        case 1: v = [0x22, 0x5C, 0x2F, 0x7F][Int.random(in: 0..<4, using: &rng)]
        case 2: v = UInt32.random(in: 0x80..<0xD800, using: &rng)
        case 3: v = UInt32.random(in: 0xE000...0xFFFF, using: &rng)
        case 4: v = UInt32.random(in: 0x10000...0x10FFFF, using: &rng)
        default: v = UInt32.random(in: 0x20..<0x7F, using: &rng)
        }
        scalars.append(Unicode.Scalar(v)!)
    }
    return String(scalars)
}

func randomValue(depth: Int, using rng: inout SeededRandom) -> JSONValue {
    switch Int.random(in: 0..<(depth > 5 ? 5 : 7), using: &rng) {
    case 0: return nil
    case 1: return .bool(Bool.random(using: &rng))
    case 2: return .number(JSONNumber(Int64.random(in: Int64.min...Int64.max, using: &rng)))
    case 3:
        // Any finite double, from its bits.
        var d: Double
        repeat { d = Double(bitPattern: rng.next()) } while !d.isFinite
        return .number(JSONNumber(d))
    case 4: return .string(randomString(using: &rng))
    case 5:
        return .array((0..<Int.random(in: 0...5, using: &rng)).map { _ in randomValue(depth: depth + 1, using: &rng) })
    default:
        var o = JSONObject()
        for i in 0..<Int.random(in: 0...5, using: &rng) {
            o.members.append((randomString(using: &rng) + String(i), randomValue(depth: depth + 1, using: &rng)))
        }
        return .object(o)
    }
}

@Test func randomValuesRoundTrip() throws {
    var rng = SeededRandom(seed: 2024)
    for _ in 0..<500 {
        let v = randomValue(depth: 0, using: &rng)
        let parsed = try JSONValue.parse(v.serialized())
        #expect(parsed == v, "\(v)")
    }
}

@Test func randomDoublesPrintShortestAndRoundTrip() throws {
    var rng = SeededRandom(seed: 99)
    for _ in 0..<5000 {
        var d: Double
        repeat { d = Double(bitPattern: rng.next()) } while !d.isFinite
        let text = JSONValue.number(JSONNumber(d)).serializedString()
        let back = try #require(try JSONValue.parse(Array(text.utf8)).double)
        #expect(back.bitPattern == d.bitPattern, "\(text)")
        #expect(Double(text)?.bitPattern == d.bitPattern, "strtod reads \(text) differently")
    }
}

@Test func builderAndAccessors() throws {
    var event: JSONValue = ["type": "session.update", "session": ["type": "realtime"]]
    event["session"]?["audio"] = ["input": ["turn_detection": nil]]
    event["event_id"] = "evt_1"
    #expect(event.serializedString() ==
        #"{"type":"session.update","session":{"type":"realtime","audio":{"input":{"turn_detection":null}}},"event_id":"evt_1"}"#)
    #expect(event["session"]?["audio"]?["input"]?["turn_detection"]?.isNull == true)
    #expect(event["session"]?["missing"] == nil)
    #expect(event["type"]?["nested"] == nil)
    #expect(event[0] == nil)
    let n = 3
    let interpolated: JSONValue = "item \(n)"
    #expect(interpolated.string == "item 3")
    var o = try #require(event.object)
    o["type"] = nil
    #expect(o.keys == ["session", "event_id"])
    let numbers = try JSONValue.parse("[1, 2.5, \"x\", 1e30]")
    #expect(numbers[0]?.int == 1 && numbers[0]?.double == 1)
    #expect(numbers[1]?.int == nil && numbers[1]?.double == 2.5)
    #expect(numbers[2]?.int == nil && numbers[2]?.string == "x")
    #expect(numbers[3]?.int == nil && numbers[3]?.double == 1e30)
    #expect(numbers[4] == nil && numbers[-1] == nil)
}

@Test func duplicateKeysLastWinsAtFirstPosition() throws {
    let v = try JSONValue.parse(#"{"a":1,"b":2,"a":3,"c":4,"b":5}"#)
    #expect(v.object?.keys == ["a", "b", "c"])
    #expect(v["a"]?.int == 3 && v["b"]?.int == 5 && v["c"]?.int == 4)
    // Large object (sorted path): 2000 members, each name twice.
    var text = "{"
    for i in 0..<1000 { text += "\"k\(i)\":\(i)," }
    for i in 0..<1000 { text += "\"k\(999 - i)\":\(10_000 + 999 - i)" + (i < 999 ? "," : "}") }
    let big = try JSONValue.parse(text)
    let o = try #require(big.object)
    #expect(o.count == 1000)
    #expect(o.keys == (0..<1000).map { "k\($0)" })
    #expect(o.members.allSatisfy { $0.value.int == 10_000 + Int($0.key.dropFirst())! })
    // Canonically equivalent but different code points are different names.
    let nfc = try JSONValue.parse("{\"\u{E9}\":1,\"e\u{301}\":2}")
    #expect(nfc.object?.count == 2)
}

@Test func depthBombIsRejectedAtTheLimit() throws {
    let bomb = [UInt8](repeating: UInt8(ascii: "["), count: 100_000)
    #expect(throws: JSONError.tooDeep(at: 64)) { try JSONValue.parse(bomb) }
    let objectBomb = Array(String(repeating: "{\"a\":", count: 100_000).utf8)
    #expect(throws: JSONError.tooDeep(at: 320)) { try JSONValue.parse(objectBomb) }
    // Even with the depth limit lifted, open containers cost heap, not machine stack.
    // (A value that deep could not be freed safely: deinit recurses, hence the limit.)
    #expect(throws: JSONError.unexpectedEnd(at: 100_000)) {
        try JSONValue.parse(bomb, limits: JSONLimits(maxDepth: 1_000_000))
    }
}

@Test func sizeLimits() throws {
    let doc = Array("[\"abcdef\"]".utf8)
    #expect(throws: JSONError.documentTooLarge(at: 9)) { try JSONValue.parse(doc, limits: JSONLimits(maxBytes: 9)) }
    #expect(throws: JSONError.stringTooLong(at: 2)) { try JSONValue.parse(doc, limits: JSONLimits(maxStringBytes: 5)) }
    #expect(try JSONValue.parse(doc, limits: JSONLimits(maxBytes: 10, maxStringBytes: 6))[0]?.string == "abcdef")
    // Escaped strings are measured after unescaping.
    let escaped = Array("[\"\\u00e9\\u00e9\\u00e9\"]".utf8)  // 6 bytes of UTF-8
    #expect(throws: JSONError.self) { try JSONValue.parse(escaped, limits: JSONLimits(maxStringBytes: 5)) }
    #expect(try JSONValue.parse(escaped, limits: JSONLimits(maxStringBytes: 6))[0]?.string == "ééé")
}

@Test func bigDocuments() throws {
    // 100 000 small objects (~3.5 MB) parse and read back.
    var text = "["
    for i in 0..<100_000 {
        if i > 0 { text += "," }
        text += "{\"i\":\(i),\"s\":\"v\(i)\",\"f\":\(i).25}"
    }
    text += "]"
    let doc = try JSONValue.parse(Array(text.utf8))
    let a = try #require(doc.array)
    #expect(a.count == 100_000)
    #expect(a[12_345]["i"]?.int == 12_345 && a[12_345]["s"]?.string == "v12345" && a[12_345]["f"]?.double == 12_345.25)
    #expect(String(decoding: doc.serialized(), as: UTF8.self) == text)
    // One 1 MiB string with escapes and multi-byte characters.
    let chunk = "abc\\n\\u00e9€"
    let body = String(repeating: chunk, count: 80_000)
    let big = try JSONValue.parse(Array(("\"" + body + "\"").utf8))
    #expect(big.string?.utf8.count == 80_000 * 9) // a b c LF é(2) €(3)
    #expect(big.string?.hasPrefix("abc\né€abc") == true)
}
