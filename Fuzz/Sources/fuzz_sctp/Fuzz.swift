import FuzzSupport

// SCTP packets and chunks (RFC 9260, RFC 8261) as they come out of DTLS: SCTPPacket.parse.
// The checksum is skipped for the first parse so mutations reach the chunk parsers
// (a real peer only gets this far with a correct CRC32c, which is no barrier to an
// attacker). Invariants:
// - a parsed packet serializes (with a correct checksum, `encodedLength` bytes) and
//   parses back with the checksum verified;
// - without INIT or INIT-ACK it parses back to the same packet. INIT parameters are
//   not carried through verbatim on purpose (RFC 9260 §3.2.1): unknown "report" ones are
//   kept to be answered as Unrecognized Parameters in our INIT-ACK, "stop" ones end the
//   list, addresses are ignored. There the second round trip must be a fixed point.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    _ = try? SCTPPacket.parse(bytes)
    let packet: SCTPPacket
    do throws(SCTPError) { packet = try SCTPPacket.parse(bytes, verifyChecksum: false) } catch { return 0 }
    let out = packet.serialize()
    invariant(!out.isEmpty, "a parsed packet does not serialize")
    invariant(out.count == packet.encodedLength, "serialized \(out.count) bytes, encodedLength says \(packet.encodedLength)")
    do throws(SCTPError) {
        let again = try SCTPPacket.parse(out)
        let hasInit = packet.chunks.contains { c in
            switch c {
            case .initiation, .initAck: return true
            default: return false
            }
        }
        if hasInit {
            let third = try SCTPPacket.parse(again.serialize())
            invariant(third == again, "INIT round trip is not a fixed point: \(again) → \(third)")
        } else {
            invariant(again == packet, "packet changed in a round trip: \(packet) → \(again)")
        }
    } catch {
        invariant(false, "serialized packet does not parse: \(error)")
    }
    return 0
}
