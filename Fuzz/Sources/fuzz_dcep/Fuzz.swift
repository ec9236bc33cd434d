import FuzzSupport

// DCEP DATA_CHANNEL_OPEN (RFC 8832 §5.1) as it arrives on a new stream. Invariant: an
// OPEN that parses serializes and parses back equal (label and protocol are kept as
// decoded, so after one pass they are valid UTF-8 and must survive exactly).

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    let open: DataChannelOpen
    do throws(SCTPError) { open = try DataChannelOpen.parse(bytes, maxStringLength: 1024) } catch { return 0 }
    let out = open.serialize()
    let labelLength = Int(bytes[8]) << 8 | Int(bytes[9])
    if Array(open.label.utf8) == Array(bytes[12..<(12 + labelLength)]),
       Array(open.protocolName.utf8) == Array(bytes[(12 + labelLength)...]) {
        // Valid UTF-8 in: the bytes come back, except the reliability parameter, which
        // means nothing for a reliable channel and is written as zero.
        var expected = bytes
        if case .reliable = open.reliability { for i in 4..<8 { expected[i] = 0 } }
        invariant(out == expected, "serialized OPEN differs from the input")
    }
    do throws(SCTPError) {
        // Replacement characters can make the strings longer than the limit; allow it here.
        let again = try DataChannelOpen.parse(out, maxStringLength: 65_535)
        invariant(again == open, "OPEN changed in a round trip: \(open) → \(again)")
    } catch {
        invariant(false, "serialized OPEN does not parse: \(error)")
    }
    return 0
}
