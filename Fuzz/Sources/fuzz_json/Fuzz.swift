import FuzzSupport

// JSON (RFC 8259) as signaling bodies and data-channel events arrive: JSONValue.parse
// with the default limits, and with tight ones (depth 8, 256-byte strings) so the limit
// paths are reached too. Invariants:
// - what parses serializes, and the serialization parses back to the same value:
//   same structure, strings, member order, and numbers with the same `double` (bit for
//   bit, so -0 stays -0) and the same `int64` where the input had one;
// - serializing reaches a fixed point after one round trip;
// - the tight limits never accept what the default ones refuse.
//
// Why not plain `==` on numbers: a literal with a fraction that rounds to a Double of
// 2^53 or more (`666666666666666660.1`) has no `int64`; its shortest round-trip digits
// (`6.666666666666666e+17`) are an exact integer literal, so the re-parsed number gains
// an `int64` (666666666666666600) equal to the same Double. No JSON text can say
// "this large number is not an integer", so that is not a defect. (Found by this target
// in its first seconds.)

func same(_ a: JSONValue, _ b: JSONValue) -> Bool {
    switch (a, b) {
    case (.null, .null): return true
    case (.bool(let x), .bool(let y)): return x == y
    case (.string(let x), .string(let y)): return x == y
    case (.number(let x), .number(let y)):
        guard x.double.bitPattern == y.double.bitPattern else { return false }
        if let i = x.int64 { return y.int64 == i }
        return y.int64.map { Double($0) == y.double } ?? true
    case (.array(let x), .array(let y)):
        return x.count == y.count && zip(x, y).allSatisfy { same($0, $1) }
    case (.object(let x), .object(let y)):
        return x.count == y.count && zip(x.members, y.members).allSatisfy { $0.key == $1.key && same($0.value, $1.value) }
    default: return false
    }
}

func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    let tight = try? JSONValue.parse(bytes, limits: JSONLimits(maxDepth: 8, maxBytes: 4096, maxStringBytes: 256))
    let value: JSONValue
    do throws(JSONError) { value = try JSONValue.parse(bytes) } catch {
        invariant(tight == nil, "tight limits accept what the defaults refuse (\(error))")
        return 0
    }
    if let tight { invariant(tight == value, "the limits change the value") }
    let out = value.serialized()
    do throws(JSONError) {
        let again = try JSONValue.parse(out)
        invariant(same(value, again), "value changed in a round trip: \(text(out)) → \(text(again.serialized()))")
        let out2 = again.serialized()
        let out3 = try JSONValue.parse(out2).serialized()
        invariant(out3 == out2, "serialization is not a fixed point: \(text(out2)) → \(text(out3))")
    } catch {
        invariant(false, "serialized value does not parse: \(error): \(text(out))")
    }
    return 0
}
