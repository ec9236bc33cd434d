import FuzzSupport

// The stream read loop under its budget (ICE/Framing.swift readStreamTurn), as
// Runtime's ICE-TCP and TURN-over-TCP paths run it, against a peer that never stops.
// Input:
//   byte 0: bit 0 picks the framer (0: TURN over TCP, 1: RFC 4571); bits 1–7 the read
//           size (1…128 bytes: a socket hands out whatever it has);
//   byte 1: the budget, in reads (1…64);
//   then the stream; after it, the "peer" keeps the socket full for ever with the
//   smallest valid frame (empty ChannelData, an empty RFC 4571 frame), which no read
//   loop may wait out.
// Invariants, for 64 turns:
// - every turn ends (budget spent, or the stream out of step for TURN) having read at
//   most budget + one read's bytes;
// - the messages delivered are the reference decoding of what was read, in order
//   (fuzz_turn_framing's reference);
// - what a framer holds stays within one message.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    guard bytes.count >= 2 else { return 0 }
    let rfc4571 = bytes[0] & 1 == 1
    let readSize = Int(bytes[0] >> 1) + 1
    let budget = (Int(bytes[1]) % 64 + 1) * readSize
    let head = Array(bytes[2...])
    let filler: [UInt8] = rfc4571 ? [0, 0] : [0x40, 0x00, 0x00, 0x00]
    var offset = 0
    // The stream as the peer sends it: the input, then the filler for ever.
    func byte(_ i: Int) -> UInt8 { i < head.count ? head[i] : filler[(i - head.count) % filler.count] }
    var buffer = [UInt8](repeating: 0, count: readSize)
    var turn4571 = RFC4571Framer()
    var turnTURN = TURNStreamFramer()
    var delivered: [[UInt8]] = []
    var broken = false
    for _ in 0..<64 {
        let start = offset
        let end = readStreamTurn(budget: budget, read: { () -> StreamRead in
            for k in 0..<readSize { buffer[k] = byte(offset + k) }
            offset += readSize
            return .bytes(readSize)
        }, consume: { n in
            if rfc4571 {
                delivered += turn4571.feed(Array(buffer[0..<n]))
                invariant(turn4571.pending <= 65_537, "RFC 4571 holds more than one frame")
                return true
            }
            do throws(ICEError) {
                delivered += try turnTURN.feed(Array(buffer[0..<n]))
            } catch {
                broken = true
                return false
            }
            invariant(turnTURN.buffered <= TURNStreamFramer.maxBuffered, "TURN framer holds more than maxBuffered")
            return true
        })
        invariant(offset - start <= budget + readSize, "a turn read \(offset - start) bytes on a budget of \(budget)")
        if broken {
            invariant(end == .stopped, "the consumer stopped, the turn says \(end)")
            break
        }
        invariant(end == .budgetSpent, "an endless stream ended a turn with \(end)")
    }
    // What was delivered is the reference decoding of what was read.
    var read: [UInt8] = []
    for i in 0..<offset { read.append(byte(i)) }
    if rfc4571 {
        invariant(delivered == reference4571(read).messages, "RFC 4571 messages differ from the reference")
    } else if !broken {
        let ref = referenceTURN(read)
        invariant(!ref.bad && delivered == ref.messages, "TURN messages differ from the reference")
    }
    return 0
}

/// Reference decodings (as fuzz_turn_framing's).
func referenceTURN(_ s: [UInt8]) -> (messages: [[UInt8]], bad: Bool) {
    var out: [[UInt8]] = []
    var i = 0
    while s.count - i >= 4 {
        let len = Int(s[i + 2]) * 256 + Int(s[i + 3])
        var total: Int
        if s[i] < 0x40 {
            if len % 4 != 0 { return (out, true) }
            total = 20 + len
        } else if s[i] < 0x50 {
            total = 4 + len
            while total % 4 != 0 { total += 1 }
        } else {
            return (out, true)
        }
        if s.count - i < total { break }
        out.append(Array(s[i..<(i + total)]))
        i += total
    }
    return (out, false)
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
