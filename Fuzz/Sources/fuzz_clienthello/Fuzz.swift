import FuzzSupport

// ClientHello reassembly (RFC 6347 §4.2.3), `ClientHelloAssembler`: Linnet's own parsing
// in front of mbedtls' server, which takes a ClientHello only whole in one record.
//
// Input: a first byte; its low bit picks the mode.
// - Raw (bit 0 clear): the rest is pieces (2-byte length + bytes), one datagram each,
//   fed in order. Invariants: a datagram that changes no counter comes back untouched, and
//   one that is held changes one; what is forwarded is never longer than the input plus one whole message;
//   every record forwarded is well framed; held state never exceeds the bound.
// - Differential (bit 0 set): the next two bytes give a message length L (1…2,000), the
//   next L bytes the message body (cut short: zero-filled), then groups of 5 bytes each
//   give a fragment (offset, count, record sequence number, taken modulo what fits) of
//   that one message, fed as one datagram each. Invariants: everything forwarded is the
//   canonical whole record of that message (RFC 6347 §4.2.6 form) with the lowest
//   record sequence number its fragments carried; once the fragments fed since the last
//   completion cover the message, it has completed; a "fragment" that is the whole
//   message passes untouched and clears what was held.

func canonical(_ body: [UInt8], seq: UInt64) -> [UInt8] {
    var r: [UInt8] = [22, 0xFE, 0xFD, 0, 0]
    for s in stride(from: 40, through: 0, by: -8) { r.append(UInt8(truncatingIfNeeded: seq >> UInt64(s))) }
    let content = 12 + body.count
    r += [UInt8(truncatingIfNeeded: content >> 8), UInt8(truncatingIfNeeded: content)]
    r += [1, UInt8(truncatingIfNeeded: body.count >> 16), UInt8(truncatingIfNeeded: body.count >> 8), UInt8(truncatingIfNeeded: body.count)]
    r += [0, 0, 0, 0, 0]
    r += [UInt8(truncatingIfNeeded: body.count >> 16), UInt8(truncatingIfNeeded: body.count >> 8), UInt8(truncatingIfNeeded: body.count)]
    return r + body
}

func fragment(_ body: [UInt8], offset: Int, count: Int, seq: UInt64) -> [UInt8] {
    var r: [UInt8] = [22, 0xFE, 0xFD, 0, 0]
    for s in stride(from: 40, through: 0, by: -8) { r.append(UInt8(truncatingIfNeeded: seq >> UInt64(s))) }
    let content = 12 + count
    r += [UInt8(truncatingIfNeeded: content >> 8), UInt8(truncatingIfNeeded: content)]
    r += [1, UInt8(truncatingIfNeeded: body.count >> 16), UInt8(truncatingIfNeeded: body.count >> 8), UInt8(truncatingIfNeeded: body.count)]
    r += [0, 0]
    r += [UInt8(truncatingIfNeeded: offset >> 16), UInt8(truncatingIfNeeded: offset >> 8), UInt8(truncatingIfNeeded: offset)]
    r += [UInt8(truncatingIfNeeded: count >> 16), UInt8(truncatingIfNeeded: count >> 8), UInt8(truncatingIfNeeded: count)]
    return r + body[offset..<(offset + count)]
}

func wellFramed(_ d: [UInt8]) -> Bool {
    var o = 0
    while o < d.count {
        guard d.count - o >= 13 else { return true }  // a cut tail is passed on as it came
        let end = o + 13 + (Int(d[o + 11]) << 8 | Int(d[o + 12]))
        guard end <= d.count else { return true }
        o = end
    }
    return true
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    guard let mode = bytes.first else { return 0 }
    var a = ClientHelloAssembler()
    if mode & 1 == 0 {
        for d in Pieces(Array(bytes.dropFirst())) {
            let before = a.stats
            let result = a.feed(d)
            switch result {
            case .hold:
                invariant(a.stats != before, "held a datagram without counting it")
            case .forward(let out):
                if a.stats == before { invariant(out == d, "a datagram was changed with nothing counted") }
                invariant(out.count <= d.count + 25 + ClientHelloAssembler.maxLength, "forwarded more than one whole message")
                invariant(wellFramed(out), "forwarded a badly framed datagram")
            }
            invariant(a.heldBytes <= ClientHelloAssembler.maxLength, "held more than the bound")
        }
        return 0
    }
    guard bytes.count >= 3 else { return 0 }
    let length = 1 + (Int(bytes[1]) << 8 | Int(bytes[2])) % 2000
    var body = Array(bytes.dropFirst(3).prefix(length))
    body += [UInt8](repeating: 0, count: length - body.count)
    var rest = Array(bytes.dropFirst(3 + length))
    var covered = [Bool](repeating: false, count: length)
    var seqs: [UInt64] = []
    while rest.count >= 5 {
        let offset = (Int(rest[0]) << 8 | Int(rest[1])) % length
        let count = 1 + (Int(rest[2]) << 8 | Int(rest[3])) % (length - offset)
        let seq = UInt64(rest[4])
        rest.removeFirst(5)
        if offset == 0 && count == length {
            // A whole message is no fragment: it goes through as it is and supersedes
            // whatever was being pieced together.
            let whole = fragment(body, offset: 0, count: length, seq: seq)
            invariant(a.feed(whole) == .forward(whole), "a whole ClientHello did not go through untouched")
            invariant(!a.isHolding, "a whole ClientHello left a partial one held")
            covered = [Bool](repeating: false, count: length)
            seqs = []
            continue
        }
        seqs.append(seq)
        for i in offset..<(offset + count) { covered[i] = true }
        switch a.feed(fragment(body, offset: offset, count: count, seq: seq)) {
        case .hold:
            invariant(!covered.allSatisfy { $0 }, "the fragments cover the message but it did not complete")
        case .forward(let out):
            invariant(covered.allSatisfy { $0 }, "completed before the fragments covered the message")
            invariant(out.count == 25 + length, "the whole record has the wrong size")
            var got: UInt64 = 0
            for i in 5..<11 { got = got << 8 | UInt64(out[i]) }
            invariant(got == seqs.min(), "not the lowest record sequence number of the fragments")
            invariant(out == canonical(body, seq: got), "the whole record is not the canonical form of the message")
            covered = [Bool](repeating: false, count: length)
            seqs = []
        }
    }
    return 0
}
