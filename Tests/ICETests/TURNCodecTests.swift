import Testing
@testable import ICE
import Wire

// RFC 5769 §2.4: the long-term-credential sample request, byte for byte from the RFC.
// Username "マトリックス" (unchanged by SASLprep), password "The<U+00AD>M<U+00AA>tr<U+2168>",
// which SASLprep (RFC 4013) turns into "TheMatrIX"; realm "example.org".
let rfc5769LongTermRequest: [UInt8] = Hex.decode("""
    00 01 00 60 21 12 a4 42 78 ad 34 33 c6 ad 72 c0 29 da 41 2e
    00 06 00 12 e3 83 9e e3 83 88 e3 83 aa e3 83 83 e3 82 af e3 82 b9 00 00
    00 15 00 1c 66 2f 2f 34 39 39 6b 39 35 34 64 36 4f 4c 33 34 6f 4c 39 46 53 54 76 79 36 34 73 41
    00 14 00 0b 65 78 61 6d 70 6c 65 2e 6f 72 67 00
    00 08 00 14 f6 70 24 65 6d d6 4a 3e 02 b8 e0 71 2e 85 c9 a2 8c a8 96 66
    """)!
let rfc5769LongTermUser = "\u{30DE}\u{30C8}\u{30EA}\u{30C3}\u{30AF}\u{30B9}"

@Suite struct RFC5769LongTerm {
    @Test func keyIsMD5OfUserRealmPassword() {
        // MD5 digests computed independently (Python's hashlib.md5 over the UTF-8 text).
        #expect(STUNMessage.longTermKey(username: rfc5769LongTermUser, realm: "example.org", password: "TheMatrIX")
                == Hex.decode("e8ca7ad59d5eb0518e312911d2dab2a9")!)
        #expect(STUNMessage.longTermKey(username: "linnet", realm: "linnet.test", password: "secret")
                == Hex.decode("e00aefeb27a1743b1b9a39d932118386")!)
    }

    @Test func sampleRequestIntegrityMatches() throws {
        let m = try STUNMessage.parse(rfc5769LongTermRequest)
        #expect(m.type == .bindingRequest)
        #expect(m.transactionID == TransactionID(0x78ad_3433, 0xc6ad_72c0, 0x29da_412e))
        #expect(m.username == rfc5769LongTermUser)
        #expect(m.nonce == "f//499k954d6OL34oL9FSTvy64sA")
        #expect(m.realm == "example.org")
        let key = STUNMessage.longTermKey(username: rfc5769LongTermUser, realm: "example.org", password: "TheMatrIX")
        try m.verifyIntegrity(of: rfc5769LongTermRequest, key: key)
        let wrong = STUNMessage.longTermKey(username: rfc5769LongTermUser, realm: "example.org", password: "TheMatrix")
        #expect(throws: ICEError.self) { try m.verifyIntegrity(of: rfc5769LongTermRequest, key: wrong) }
    }

    @Test func sampleRequestReserializesByteForByte() throws {
        // The RFC pads this one with zero bytes, as our serializer does.
        let m = STUNMessage(type: .bindingRequest, transactionID: TransactionID(0x78ad_3433, 0xc6ad_72c0, 0x29da_412e),
                            attributes: [.username(Username(rfc5769LongTermUser)), .nonce(Nonce("f//499k954d6OL34oL9FSTvy64sA")),
                                         .realm(Realm("example.org"))])
        let key = STUNMessage.longTermKey(username: rfc5769LongTermUser, realm: "example.org", password: "TheMatrIX")
        #expect(try m.serialized(integrityKey: key, fingerprint: false) == rfc5769LongTermRequest)
    }
}

@Suite struct ChannelDataCodec {
    @Test func encodeDecodeUDP() throws {
        let cd = ChannelData(channel: 0x4001, data: [1, 2, 3, 4, 5])
        let bytes = cd.serialized(padded: false)
        #expect(bytes == [0x40, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5])
        #expect(try ChannelData.parse(bytes) == cd)
        // RFC 8656 §12.5: over UDP the datagram may carry padding the length does not count.
        #expect(try ChannelData.parse(bytes + [0, 0, 0]) == cd)
    }

    @Test func paddingOverStreams() throws {
        for n in 0...9 {
            let cd = ChannelData(channel: 0x4FFF, data: (0..<n).map { UInt8($0 + 1) })
            let bytes = cd.serialized(padded: true)
            #expect(bytes.count % 4 == 0)
            #expect(bytes.count == 4 + (n + 3) / 4 * 4)
            #expect(Int(bytes[2]) << 8 | Int(bytes[3]) == n, "the length counts the data, not the padding")
            #expect(try ChannelData.parse(bytes) == cd)
        }
    }

    @Test func refusesBadInput() {
        #expect(throws: ICEError.self) { try ChannelData.parse([0x40, 0x00, 0x00]) }
        #expect(throws: ICEError.self) { try ChannelData.parse([0x40, 0x00, 0x00, 0x05, 1, 2, 3, 4]) }
        // 0x5000 and above are reserved (RFC 8656 §12), 0x3FFF is STUN territory.
        #expect(throws: ICEError.self) { try ChannelData.parse([0x50, 0x00, 0x00, 0x00]) }
        #expect(throws: ICEError.self) { try ChannelData.parse([0x3F, 0xFF, 0x00, 0x00]) }
    }
}

@Suite struct TURNStreamFraming {
    /// A STUN message, a padded ChannelData, an unpadded-length one, then another STUN.
    static func stream() throws -> (bytes: [UInt8], messages: [[UInt8]]) {
        let a = try STUNMessage(type: .allocateRequest, transactionID: TransactionID(1, 2, 3),
                                attributes: [.requestedTransport(RequestedTransport()), .lifetime(Lifetime(seconds: 600))]).serialized()
        let b = ChannelData(channel: 0x4000, data: [9, 8, 7]).serialized(padded: true)
        let c = ChannelData(channel: 0x4123, data: Array(repeating: 0xAB, count: 8)).serialized(padded: true)
        let d = try STUNMessage(type: .dataIndication, transactionID: TransactionID(4, 5, 6),
                                attributes: [.data(DataAttribute([1, 2, 3, 4, 5]))]).serialized()
        let e = ChannelData(channel: 0x4001, data: []).serialized(padded: true)
        return (a + b + c + d + e, [a, b, c, d, e])
    }

    @Test func wholeStreamAtOnce() throws {
        let (bytes, messages) = try Self.stream()
        var f = TURNStreamFramer()
        #expect(try f.feed(bytes) == messages)
    }

    @Test func splitAtEveryByteBoundary() throws {
        let (bytes, messages) = try Self.stream()
        for cut in 0...bytes.count {
            var f = TURNStreamFramer()
            var got = try f.feed(Array(bytes[0..<cut]))
            got += try f.feed(Array(bytes[cut...]))
            #expect(got == messages, "cut at \(cut)")
        }
        // And one byte at a time.
        var f = TURNStreamFramer()
        var got: [[UInt8]] = []
        for b in bytes { got += try f.feed([b]) }
        #expect(got == messages)
    }

    @Test func deframedChannelDataParses() throws {
        var f = TURNStreamFramer()
        let out = try f.feed(ChannelData(channel: 0x4000, data: [1, 2, 3, 4, 5]).serialized(padded: true))
        #expect(out.count == 1)
        #expect(try ChannelData.parse(out[0]).data == [1, 2, 3, 4, 5])
    }

    @Test func garbageIsRefused() {
        var f = TURNStreamFramer()
        // 0x80: neither STUN (top bits 00) nor ChannelData (0x40–0x4F): no way to resync.
        #expect(throws: ICEError.self) { try f.feed([0x80, 0, 0, 0]) }
        var g = TURNStreamFramer()
        #expect(throws: ICEError.self) { try g.feed([0x5A, 0, 0, 4, 1, 2, 3, 4]) }
        // A STUN header must be a whole number of 4-byte words (RFC 8489 §5).
        var h = TURNStreamFramer()
        #expect(throws: ICEError.self) { try h.feed([0x00, 0x01, 0x00, 0x03] + [UInt8](repeating: 0, count: 20)) }
    }

    @Test func bufferIsBounded() throws {
        var f = TURNStreamFramer()
        // A STUN header declaring 65532 bytes: legal, so it waits…
        var header: [UInt8] = [0x00, 0x01, 0xFF, 0xFC, 0x21, 0x12, 0xA4, 0x42]
        header += [UInt8](repeating: 0, count: 12)
        #expect(try f.feed(header) == [])
        // …all but its last byte is held (the largest legal partial message)…
        let body = [UInt8](repeating: 0, count: 0xFFFC)
        #expect(try f.feed(Array(body.dropLast())) == [])
        #expect(f.buffered == 20 + 0xFFFC - 1)
        // …and the whole message comes out once it is there.
        #expect(try f.feed([0]) == [header + body])
        #expect(f.buffered == 0)
        // Never more than one message's worth waits.
        #expect(f.buffered <= TURNStreamFramer.maxBuffered)
    }
}

@Suite struct RFC4571Framing {
    static let packets: [[UInt8]] = [[1], [2, 3, 4, 5, 6, 7, 8], Array(repeating: 0x42, count: 300), [9, 9]]

    @Test func frameAndDeframe() {
        var stream: [UInt8] = []
        for p in Self.packets { stream += RFC4571Framer.frame(p)! }
        #expect(stream.count == Self.packets.reduce(0) { $0 + $1.count + 2 })
        #expect(Array(stream[0..<3]) == [0x00, 0x01, 0x01])
        var f = RFC4571Framer()
        #expect(f.feed(stream) == Self.packets)
        #expect(f.pending == 0)
    }

    @Test func splitAtEveryByteBoundary() {
        var stream: [UInt8] = []
        for p in Self.packets { stream += RFC4571Framer.frame(p)! }
        for cut in 0...stream.count {
            var f = RFC4571Framer()
            let got = f.feed(Array(stream[0..<cut])) + f.feed(Array(stream[cut...]))
            #expect(got == Self.packets, "cut at \(cut)")
            #expect(f.pending == 0)
        }
    }

    @Test func oversizedRefusedAndEmptySkipped() {
        #expect(RFC4571Framer.frame([UInt8](repeating: 0, count: 65_536)) == nil)
        #expect(RFC4571Framer.frame([UInt8](repeating: 0, count: 65_535))?.count == 65_537)
        var f = RFC4571Framer()
        #expect(f.feed([0, 0, 0, 1, 7]) == [[7]])
        // A partial frame is held, never more than one frame's worth.
        #expect(f.feed([0xFF, 0xFF, 1, 2, 3]) == [])
        #expect(f.pending == 5)
    }
}

@Suite struct ICEServerURLParsing {
    @Test func rfc7064And7065Examples() throws {
        // RFC 7064 §3.2 / RFC 7065 §3.2 style URIs and their defaults.
        let a = try ICEServerURL(parsing: "stun:example.org")
        #expect(a.scheme == .stun && a.host == "example.org" && a.port == 3478 && !a.isTURN)
        let b = try ICEServerURL(parsing: "stuns:example.org")
        #expect(b.scheme == .stuns && b.port == 5349 && b.transport == .tls)
        let c = try ICEServerURL(parsing: "turn:example.org")
        #expect(c.isTURN && c.port == 3478 && c.transport == .udp)
        let d = try ICEServerURL(parsing: "turns:example.org")
        #expect(d.port == 5349 && d.transport == .tls)
        let e = try ICEServerURL(parsing: "turn:example.org?transport=udp")
        #expect(e.transport == .udp && e.port == 3478)
        let f = try ICEServerURL(parsing: "turn:example.org?transport=tcp")
        #expect(f.transport == .tcp && f.port == 3478)
        let g = try ICEServerURL(parsing: "turns:example.org?transport=tcp")
        #expect(g.transport == .tls && g.port == 5349)
        let h = try ICEServerURL(parsing: "turn:192.0.2.1:3479?transport=tcp")
        #expect(h.host == "192.0.2.1" && h.port == 3479 && h.ip == IPAddress("192.0.2.1"))
        let i = try ICEServerURL(parsing: "turn:[2001:db8::1]:443")
        #expect(i.host == "2001:db8::1" && i.port == 443 && i.ip == IPAddress("2001:db8::1"))
        #expect(i.description == "turn:[2001:db8::1]:443")
        let j = try ICEServerURL(parsing: "TURN:Example.org:65535?Transport=TCP")
        #expect(j.scheme == .turn && j.port == 65535 && j.transport == .tcp)
        #expect(f.description == "turn:example.org:3478?transport=tcp")
        #expect(try ICEServerURL(parsing: f.description) == f)
    }

    @Test func refusals() {
        let bad = [
            "", "example.org", "http:example.org", "stun:", "turn:?transport=udp",
            "turns:example.org?transport=udp",     // DTLS (RFC 7350): not supported
            "turn:user@example.org", "turn:user:pw@example.org:3478",
            "turn:example.org:0", "turn:example.org:65536", "turn:example.org:", "turn:example.org:+80",
            "turn:example.org:80x", "turn:example.org:-1",
            "turn:2001:db8::1", "turn:[2001:db8::1", "turn:[192.0.2.1]", "turn:[2001:db8::1]x",
            "turn:[example.org]:3478",
            "stun:example.org?transport=udp", "turn:example.org?transport=sctp", "turn:example.org?foo",
            "turn:example.org/path", "turn:exa mple.org",
        ]
        for text in bad {
            #expect(throws: ICEError.self, "\(text) should be refused") { try ICEServerURL(parsing: text) }
        }
    }

    @Test func refusalSaysWhy() {
        do {
            _ = try ICEServerURL(parsing: "turns:example.org?transport=udp")
            Issue.record("accepted")
        } catch {
            #expect("\(error)".contains("DTLS"))
        }
    }
}
