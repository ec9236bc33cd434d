import FuzzSupport

// STUN (RFC 8489) as the ICE agent receives it: STUNMessage.parse of one datagram, then
// MESSAGE-INTEGRITY checking with a fixed key. Invariants:
// - what parses re-serializes and parses back to the same type, transaction ID and
//   attributes (unknown and post-integrity attributes are dropped on purpose);
// - serializing with MESSAGE-INTEGRITY and FINGERPRINT gives bytes whose integrity
//   verifies with the same key and whose fingerprint parse accepts.

// The RFC 5769 password, so the seed vectors' MESSAGE-INTEGRITY verifies.
let key = STUNMessage.shortTermKey(password: "VOkJxbRl1RmTxUk/WvJxBt")

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    let message: STUNMessage
    do throws(ICEError) { message = try STUNMessage.parse(bytes) } catch { return 0 }
    if message.integrity != nil {
        do throws(ICEError) { try message.verifyIntegrity(of: bytes, key: key) } catch {}
    }
    let plain = STUNMessage(type: message.type, transactionID: message.transactionID, attributes: message.attributes)
    let out: [UInt8]
    do throws(ICEError) { out = try plain.serialized() } catch { return 0 }  // too big for 1280 bytes
    do throws(ICEError) {
        let again = try STUNMessage.parse(out)
        invariant(again.type == message.type && again.transactionID == message.transactionID,
                  "header changed in a round trip")
        invariant(again.attributes == message.attributes,
                  "attributes changed in a round trip: \(message.attributes) → \(again.attributes)")
    } catch {
        invariant(false, "re-serialized message does not parse: \(error)")
    }
    do throws(ICEError) {
        let signed = try plain.serialized(integrityKey: key, fingerprint: true)
        let again = try STUNMessage.parse(signed)
        invariant(again.fingerprint != nil, "fingerprint missing after serializing with one")
        try again.verifyIntegrity(of: signed, key: key)
    } catch {
        if case .bufferTooSmall = error { return 0 }
        if case .unencodable = error { return 0 }
        invariant(false, "signed message does not verify: \(error)")
    }
    return 0
}
