import Testing
import Glibc
import CMbedTLS
import Wire
@testable import DTLS

/// The records of one datagram (RFC 6347 §4.1: 13-byte header, 2-byte length at 11).
func records(_ d: [UInt8]) -> [[UInt8]] {
    var out: [[UInt8]] = [], o = 0
    while o + 13 <= d.count {
        let end = o + 13 + (Int(d[o + 11]) << 8 | Int(d[o + 12]))
        guard end <= d.count else { break }
        out.append(Array(d[o..<end]))
        o = end
    }
    return out
}

func put24(_ r: inout [UInt8], _ v: Int) { r += [UInt8(truncatingIfNeeded: v >> 16), UInt8(truncatingIfNeeded: v >> 8), UInt8(truncatingIfNeeded: v)] }

/// Cuts one record holding one whole handshake message into records of one fragment
/// each (RFC 6347 §4.2.3: the same message_seq and length, fragment_offset and
/// fragment_length per piece), with record sequence numbers from `firstSeq` on. Written
/// from the RFC's field tables, not from the code under test.
func refragment(_ record: [UInt8], _ pieces: [(offset: Int, count: Int)], firstSeq: UInt64 = 0) -> [[UInt8]] {
    let hs = Array(record[13...])
    let length = Int(hs[1]) << 16 | Int(hs[2]) << 8 | Int(hs[3])
    let body = Array(hs[12...])
    precondition(body.count == length)
    return pieces.enumerated().map { i, piece in
        var r = Array(record[0..<3]) + [0, 0]
        let seq = firstSeq + UInt64(i)
        for shift in stride(from: 40, through: 0, by: -8) { r.append(UInt8(truncatingIfNeeded: seq >> UInt64(shift))) }
        let content = 12 + piece.count
        r += [UInt8(content >> 8), UInt8(content & 0xFF)]
        r.append(hs[0])
        put24(&r, length)
        r += [hs[4], hs[5]]
        put24(&r, piece.offset)
        put24(&r, piece.count)
        r += body[piece.offset..<(piece.offset + piece.count)]
        return r
    }
}

/// A record's 48-bit sequence number (RFC 6347 §4.1).
func sequence(_ r: [UInt8]) -> UInt64 {
    var seq: UInt64 = 0
    for i in 5..<11 { seq = seq << 8 | UInt64(r[i]) }
    return seq
}

/// A ClientHello record cut by `plan`, numbered from its own record sequence number (the
/// one the client used), as an intermediary or a fragmenting client would number them.
func cut(_ r: [UInt8], _ plan: Plan) -> [[UInt8]] {
    plan.datagrams(refragment(r, plan.pieces(r.count - 25), firstSeq: sequence(r)))
}

/// The ClientHello a real mbedtls client sends first (one record, one message).
func firstClientHello() throws -> (pair: Pair, record: [UInt8]) {
    let pair = try Pair()
    pair.client.start(now: pair.now)
    guard case .transmit(let d) = pair.client.pollOutput() else { throw DTLSError.notConnected }
    let r = records(d)
    precondition(r.count == 1 && r[0][0] == 22 && r[0][13] == 1)
    return (pair, r[0])
}

/// A fragment plan over a message of `n` bytes.
enum Plan: String, CaseIterable, CustomStringConvertible {
    /// GStreamer 1.22 (OpenSSL 3): 277 bytes as 0–230 and 230–277, in two datagrams.
    case twoInOrder
    case twoReversed
    /// Overlaps, duplicates and a piece wholly inside another, out of order.
    case overlappingAndDuplicated
    /// One byte per record, each record its own datagram, shuffled.
    case bytewiseShuffled
    /// Three fragments as three records of one datagram.
    case allInOneDatagram

    var description: String { rawValue }

    func pieces(_ n: Int) -> [(offset: Int, count: Int)] {
        let cut = n * 230 / 277
        switch self {
        case .twoInOrder: return [(0, cut), (cut, n - cut)]
        case .twoReversed: return [(cut, n - cut), (0, cut)]
        case .overlappingAndDuplicated:
            return [(n / 4, n / 3), (0, n / 5), (n / 4 + 2, 5), (n - n / 4, n / 4), (0, n / 5), (n / 6, n / 2), (n / 2, n / 3)]
        case .bytewiseShuffled: return (0..<n).map { ($0, 1) }
        case .allInOneDatagram: return [(0, n / 3), (n / 3, n / 3), (2 * (n / 3), n - 2 * (n / 3))]
        }
    }

    func datagrams(_ fragments: [[UInt8]]) -> [[UInt8]] {
        switch self {
        case .allInOneDatagram: return [fragments.flatMap { $0 }]
        case .bytewiseShuffled:
            var rng = SeededRandom(seed: 7)
            return fragments.shuffled(using: &rng)
        default: return fragments
        }
    }
}

@Suite struct ClientHelloTests {
    /// The reassembled record is the canonical single-fragment form of the message
    /// (RFC 6347 §4.2.6): byte for byte the record the client sent whole, given the
    /// lowest of the fragments' record sequence numbers.
    @Test(arguments: Plan.allCases)
    func reassemblesToTheWholeRecord(plan: Plan) throws {
        let (_, record) = try firstClientHello()
        let n = record.count - 25
        let fragments = refragment(record, plan.pieces(n), firstSeq: 7)
        var a = ClientHelloAssembler()
        var out: [[UInt8]] = []
        for d in plan.datagrams(fragments) {
            if case .forward(let bytes) = a.feed(d) { out.append(bytes) }
        }
        #expect(out.count == 1)
        let whole = try #require(out.first)
        #expect(whole.count == record.count)
        #expect(Array(whole[0..<5]) == Array(record[0..<5]))
        #expect(Array(whole[11...]) == Array(record[11...]))
        #expect(sequence(whole) == 7)
        #expect(a.stats.reassembled == 1 && a.stats.fragments == plan.pieces(n).count && a.stats.dropped == 0)
        #expect(!a.isHolding)
    }

    /// Through a real handshake: the server completes it with a client whose ClientHello
    /// arrived in pieces, with no retransmission (the clock never moves), so the
    /// transcript both sides hashed is the same. mbedtls 2.28 alone fails all of these
    /// ("ClientHello fragmentation not supported").
    @Test(arguments: Plan.allCases)
    func serverHandshakesWithAFragmentedClientHello(plan: Plan) throws {
        let pair = try Pair()
        pair.rewrite = { toServer, d in
            guard toServer, let r = records(d).first, r[0] == 22, r[13] == 1 else { return [d] }
            return cut(r, plan)
        }
        let start = pair.now
        pair.connect()
        #expect(pair.server.state == .connected && pair.client.state == .connected)
        #expect(keys(pair.serverEvents)?.remoteKey == keys(pair.clientEvents)?.localKey)
        #expect(pair.now == start)
        #expect(pair.server.clientHelloStats.reassembled == 1)
    }

    /// A browser's ClientHello with a post-quantum key share is 1,413 bytes and leaves
    /// as two datagrams of 1,200 and 263. An mbedtls client with 1,200 bytes of ALPN
    /// names (which our server ignores) makes one of that size; mbedtls never fragments
    /// its own hello, so it is cut the browser's way on the wire.
    @Test func serverTakesABrowserSizedClientHelloInTwoDatagrams() throws {
        let pair = try Pair()
        let names = (0..<5).map { i in strdup(String(repeating: String(UnicodeScalar(UInt8(0x61 + i))), count: 250)) }
        let list = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: names.count + 1)
        for (i, n) in names.enumerated() { list[i] = UnsafePointer(n) }
        list[names.count] = nil
        defer {
            names.forEach { free($0) }
            list.deallocate()
        }
        #expect(mbedtls_ssl_conf_alpn_protocols(pair.client.config, list) == 0)
        var sizes: [Int] = []
        pair.rewrite = { toServer, d in
            guard toServer, let r = records(d).first, r[0] == 22, r[13] == 1 else { return [d] }
            let n = r.count - 25
            let first = 1200 - 25
            let out = refragment(r, [(0, first), (first, n - first)], firstSeq: sequence(r))
            sizes = out.map(\.count)
            return out
        }
        let start = pair.now
        pair.connect()
        #expect(pair.server.state == .connected && pair.client.state == .connected)
        #expect(sizes.first == 1200 && sizes.count == 2 && sizes.reduce(0, +) > 1400)
        #expect(pair.server.clientHelloStats.reassembled == 1)
        #expect(pair.now == start)
    }

    /// A retransmitted fragmented ClientHello (its answer lost, or just a fast timer:
    /// some stacks repeat every 50 ms) is assembled again and mbedtls answers it by
    /// resending its flight; the handshake still completes.
    @Test func retransmittedFragmentsAreAssembledAgain() throws {
        let pair = try Pair()
        var hellos = 0
        pair.rewrite = { toServer, d in
            guard toServer, let r = records(d).first, r[0] == 22, r[13] == 1 else { return [d] }
            hellos += 1
            return cut(r, .twoReversed)
        }
        // The server's first flight is lost: the client repeats its hello on its timer.
        pair.drop = { toServer, i in !toServer && i == 0 }
        pair.connect()
        #expect(pair.server.state == .connected && pair.client.state == .connected)
        #expect(hellos == 2)
        #expect(pair.server.clientHelloStats.reassembled == 2)
    }

    /// Too large, inconsistent or conflicting fragments are dropped and counted; the
    /// server keeps handshaking and completes with the real fragments afterwards.
    @Test func badFragmentsAreDroppedAndCounted() throws {
        let (pair, record) = try firstClientHello()
        let n = record.count - 25
        let good = refragment(record, [(0, 60), (60, n - 60)])
        var huge = refragment(record, [(0, 60)])[0]
        huge.replaceSubrange(14..<17, with: [0, 0x13, 0x88])  // length 5000 > 4096
        var otherLength = refragment(record, [(60, 40)])[0]
        otherLength.replaceSubrange(14..<17, with: [0, UInt8((n + 1) >> 8), UInt8((n + 1) & 0xFF)])
        var conflicting = refragment(record, [(30, 60)])[0]
        conflicting[25 + 5] ^= 0xFF  // a byte inside the overlap with `good[0]`
        var pastTheEnd = refragment(record, [(n - 10, 10)])[0]
        pastTheEnd.replaceSubrange(19..<22, with: [0, UInt8((n - 5) >> 8), UInt8((n - 5) & 0xFF)])  // ends 5 bytes past length

        pair.server.start(now: pair.now)
        pair.server.handleInput(huge, now: pair.now)
        pair.server.handleInput(good[0], now: pair.now)
        pair.server.handleInput(otherLength, now: pair.now)
        pair.server.handleInput(conflicting, now: pair.now)
        pair.server.handleInput(pastTheEnd, now: pair.now)
        #expect(pair.server.state == .handshaking)
        #expect(pair.server.clientHelloStats.dropped == 4)
        #expect(pair.server.assembler?.isHolding == true)
        if case .transmit = pair.server.pollOutput() { Issue.record("the server answered before the ClientHello was whole") }
        pair.server.handleInput(good[1], now: pair.now)
        pair.pump()
        var steps = 0
        while !(pair.client.state == .connected && pair.server.state == .connected), steps < 20 {
            pair.advance()
            steps += 1
        }
        #expect(pair.server.state == .connected && pair.client.state == .connected)
        #expect(pair.server.clientHelloStats.reassembled == 1)
    }

    /// A datagram with no ClientHello fragment is handed over as it came.
    @Test func otherDatagramsPassUntouched() throws {
        let (_, record) = try firstClientHello()
        var a = ClientHelloAssembler()
        #expect(a.feed(record) == .forward(record))
        let alert: [UInt8] = [21, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 9, 0, 2, 2, 40]
        #expect(a.feed(alert + [1, 2, 3]) == .forward(alert + [1, 2, 3]))
        #expect(a.stats == ClientHelloAssembler.Stats())
        // A whole copy supersedes a partial one (found by fuzz_clienthello: the partial
        // copy used to stay held, and its record number went into a later completion).
        _ = a.feed(refragment(record, [(0, 20)], firstSeq: 5)[0])
        #expect(a.isHolding)
        #expect(a.feed(record) == .forward(record))
        #expect(!a.isHolding)
    }

    /// The server's CertificateRequest (RFC 5246 §7.4.4) names no certificate authority:
    /// pion and Go's crypto/tls send no certificate when the list names none of theirs.
    /// It offers ECDSA and RSA signatures with SHA-256, so the client may use either.
    @Test func certificateRequestNamesNoAuthority() throws {
        let pair = try Pair()
        pair.connect()
        #expect(pair.server.state == .connected)
        // The server's first flight is in epoch 0, in the clear: find handshake type 13.
        var request: [UInt8]? = nil
        for d in pair.wire[1] {
            for r in records(d) where r[0] == 22 && r[3] == 0 && r[4] == 0 {
                var h = 13
                while h + 12 <= r.count {
                    let count = Int(r[h + 9]) << 16 | Int(r[h + 10]) << 8 | Int(r[h + 11])
                    if r[h] == 13 { request = Array(r[(h + 12)..<min(r.count, h + 12 + count)]) }
                    h += 12 + count
                }
            }
        }
        let body = try #require(request)
        let types = Int(body[0])
        #expect(Array(body[1...types]).contains(64) && Array(body[1...types]).contains(1))  // ecdsa_sign, rsa_sign
        var i = 1 + types
        let algorithmsLength = Int(body[i]) << 8 | Int(body[i + 1])
        let algorithms = Array(body[(i + 2)..<(i + 2 + algorithmsLength)])
        let pairs = stride(from: 0, to: algorithms.count, by: 2).map { (algorithms[$0], algorithms[$0 + 1]) }
        #expect(pairs.contains { $0 == (4, 3) } && pairs.contains { $0 == (4, 1) })  // sha256 with ecdsa, rsa
        i += 2 + algorithmsLength
        #expect(Array(body[i..<(i + 2)]) == [0, 0])  // certificate_authorities<0..2^16-1>: empty
        #expect(body.count == i + 2)
    }

    /// A client that sends an empty Certificate gets no session: WebRTC authenticates by
    /// the certificate's fingerprint.
    @Test func clientWithoutCertificateIsRefused() throws {
        let pair = try Pair()
        // mbedtls 2.28 has no call that unconfigures a certificate: empty the list.
        pair.client.config.pointee.key_cert = nil
        pair.connect()
        #expect(pair.serverEvents.contains(.failed(.noPeerCertificate)))
        #expect(keys(pair.serverEvents) == nil)
    }
}

@Suite struct BeforeTheHelloTests {
    /// Before its first ClientHello the server drops what is not one (an alert, stale
    /// application data, bytes that only look like DTLS) instead of failing on it.
    @Test func strayRecordsBeforeTheHelloAreDropped() throws {
        let pair = try Pair()
        pair.server.start(now: pair.now)
        pair.server.handleInput([21, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 40], now: pair.now)
        pair.server.handleInput([23, 0xFE, 0xFD, 0, 1, 0, 0, 0, 0, 0, 5, 0, 4, 1, 2, 3, 4], now: pair.now)
        pair.server.handleInput([22, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 1, 0, 12, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], now: pair.now)
        pair.server.handleInput([UInt8](repeating: 0x16, count: 60), now: pair.now)
        #expect(pair.server.state == .handshaking)
        #expect(pair.server.droppedBeforeHello == 4)
        pair.connect()
        #expect(pair.server.state == .connected && pair.client.state == .connected)
    }
}
