import FuzzSupport

// The two stream framers of TURN and ICE-TCP, fed in arbitrary reads:
//   first byte bit 0 = 0: TURNStreamFramer (RFC 8656 §12.5, TURN over TCP/TLS);
//                    = 1: RFC4571Framer (RFC 4571 §2, ICE-TCP).
//   first byte >> 1: how many cut positions follow (0–7), then the cuts, then the stream.
// Invariants, against a plain reference decoder written here:
// - the messages are those of the reference, in order, whatever the cuts;
// - TURN: each is a STUN message of 20 + length bytes or ChannelData padded to four;
//   an error comes exactly where the reference finds the stream out of step, and never
//   before; what waits is less than one message and within maxBuffered;
// - RFC 4571: what waits is the unfinished tail.

/// Reference TURN stream decoding: the messages, and whether the stream went wrong.
func referenceTURN(_ s: [UInt8]) -> (messages: [[UInt8]], bad: Bool, rest: Int) {
    var out: [[UInt8]] = []
    var i = 0
    while s.count - i >= 4 {
        let len = Int(s[i + 2]) * 256 + Int(s[i + 3])
        var total: Int
        if s[i] < 0x40 {
            if len % 4 != 0 { return (out, true, s.count - i) }
            total = 20 + len
        } else if s[i] < 0x50 {
            total = 4 + len
            while total % 4 != 0 { total += 1 }
        } else {
            return (out, true, s.count - i)
        }
        if s.count - i < total { break }
        out.append(Array(s[i..<(i + total)]))
        i += total
    }
    return (out, false, s.count - i)
}

func reference4571(_ s: [UInt8]) -> (messages: [[UInt8]], rest: Int) {
    var out: [[UInt8]] = []
    var i = 0
    while s.count - i >= 2 {
        let len = Int(s[i]) * 256 + Int(s[i + 1])
        if s.count - i - 2 < len { break }
        if len > 0 { out.append(Array(s[(i + 2)..<(i + 2 + len)])) }
        i += 2 + len
    }
    return (out, s.count - i)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    guard let mode = bytes.first else { return 0 }
    let nCuts = Int(mode >> 1) & 7
    guard bytes.count >= 1 + nCuts else { return 0 }
    let cuts = Array(bytes[1..<(1 + nCuts)])
    let stream = Array(bytes[(1 + nCuts)...])
    let reads = split(stream, cuts: cuts)

    if mode & 1 == 1 {
        var f = RFC4571Framer()
        var got: [[UInt8]] = []
        for r in reads { got += f.feed(r) }
        let ref = reference4571(stream)
        invariant(got == ref.messages, "RFC 4571 messages differ from the reference")
        invariant(f.pending == ref.rest, "RFC 4571 pending \(f.pending), reference \(ref.rest)")
        invariant(f.pending <= 65_536 + 1, "RFC 4571 holds more than one frame")
        return 0
    }

    var f = TURNStreamFramer()
    var got: [[UInt8]] = []
    var failed = false
    for r in reads {
        do throws(ICEError) {
            got += try f.feed(r)
        } catch {
            failed = true
            break
        }
    }
    let ref = referenceTURN(stream)
    invariant(failed == ref.bad, "framer error \(failed), reference says out of step: \(ref.bad)")
    if !failed {
        invariant(got == ref.messages, "TURN messages differ from the reference")
        invariant(f.buffered == ref.rest, "buffered \(f.buffered), reference \(ref.rest)")
        invariant(f.buffered <= TURNStreamFramer.maxBuffered, "framer holds more than maxBuffered")
    } else {
        // Before the error, the framer gave what the reference gave (maybe fewer: the
        // read that held the bad header may have held whole messages before it).
        invariant(got.count <= ref.messages.count && Array(ref.messages.prefix(got.count)) == got,
                  "TURN messages before the error differ from the reference")
    }
    for m in got {
        let len = Int(m[2]) * 256 + Int(m[3])
        if m[0] < 0x40 { invariant(m.count == 20 + len, "a STUN message of the wrong size") }
        else { invariant(m.count % 4 == 0 && m.count - 4 >= len && m.count - 4 - len < 4, "ChannelData badly padded") }
    }
    return 0
}
