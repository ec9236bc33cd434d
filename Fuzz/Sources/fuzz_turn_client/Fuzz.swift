import FuzzSupport

// TURN (RFC 8656) as the client receives it: hostile server messages into
// TURNClient.handleMessage, fed after an allocation exists, with one peer's permission
// and channel installed and another peer's permission pending, so the deep paths run
// (refresh, permission and channel responses, ChannelData, Data indications, 438/401).
//
// The input is pieces (FuzzSupport.Pieces); a piece's first byte says what to do with
// the rest:
//   op & 3 == 0: feed the bytes as they are;
//   op & 3 == 1: put the ID of a recent request (op >> 2) into the STUN header, feed;
//   op & 3 == 2: the same, and if it parses, re-sign it with the long-term key (so it
//                passes the MESSAGE-INTEGRITY check), feed;
//   op & 3 == 3: (op >> 2) & 3 = 0: advance the clock by the next two bytes in ms and
//                fire the timers; 1: send the rest to a peer; 2: refresh; 3: release.
// Invariants: everything the client sends is a STUN request or indication that parses,
// or ChannelData on a bound channel; at most one .failed; nothing is sent after
// .failed, and after release only the release's own Refresh (LIFETIME 0).

let user = "linnet", realm = "linnet.test", password = "secret"
let key = STUNMessage.longTermKey(username: user, realm: realm, password: password)
let peerA = SocketAddress(ip: IPAddress("203.0.113.5")!, port: 6000)
let peerB = SocketAddress(ip: IPAddress("198.51.100.9")!, port: 7000)

struct Harness {
    var client: TURNClient<SeededRandom>
    var now = Instant(nanoseconds: 1_000_000_000)
    var recent: [TransactionID] = []
    var lastSent: [[UInt8]] = []
    var failures = 0
    var over = false  // failed or released
    var released = false

    init() {
        let url = ICEServerURL(scheme: .turn, host: "192.0.2.1")
        client = TURNClient(server: TURNServer(url: url, username: user, credential: password), rng: SeededRandom(seed: 1))
    }

    mutating func drain(context: String) {
        lastSent.removeAll()
        while true {
            switch client.pollOutput() {
            case .send(let b):
                lastSent.append(b)
                check(b)
                if over {
                    // After release only its Refresh (LIFETIME 0) may go: retransmitted,
                    // or again after a 438. After a failure, nothing.
                    let m = try? STUNMessage.parse(b)
                    invariant(released && failures == 0 && m?.type == .refreshRequest && m?.lifetime == 0,
                              "sent after failure or release (\(context))")
                }
            case .event(let e):
                if case .failed = e {
                    failures += 1
                    invariant(failures == 1, "a second .failed (\(context))")
                    over = true
                }
            case .timeout:
                return
            }
        }
    }

    mutating func check(_ b: [UInt8]) {
        guard let first = b.first else { return invariant(false, "an empty send") }
        if ChannelData.isChannelData(firstByte: first) {
            let cd: ChannelData
            do throws(ICEError) { cd = try ChannelData.parse(b) } catch { return invariant(false, "our ChannelData does not parse: \(error)") }
            invariant(ChannelNumber.range.contains(cd.channel), "channel out of range")
            return
        }
        let m: STUNMessage
        do throws(ICEError) { m = try STUNMessage.parse(b) } catch { return invariant(false, "our STUN does not parse: \(error)") }
        invariant(m.type.messageClass == .request || m.type.messageClass == .indication, "we sent a response")
        if m.type.messageClass == .request {
            recent.append(m.transactionID)
            if recent.count > 8 { recent.removeFirst() }
        }
    }

    mutating func feed(_ b: [UInt8]) {
        client.handleMessage(b, now: now)
        drain(context: "message")
    }

    /// Answers the last request the client sent.
    mutating func answer(_ attributes: [STUNAttribute] = [], error: (Int, String)? = nil, signed: Bool = true) {
        guard let req = lastSent.last.flatMap({ try? STUNMessage.parse($0) }) else { return }
        answer(req, attributes, error: error, signed: signed)
    }

    mutating func answer(_ req: STUNMessage, _ attributes: [STUNAttribute] = [], error: (Int, String)? = nil, signed: Bool = true) {
        var attrs = attributes
        if let (c, r) = error { attrs.insert(.errorCode(ErrorCode(code: c, reason: r)), at: 0) }
        let type = STUNMessageType(method: req.type.method, messageClass: error == nil ? .successResponse : .errorResponse)
        guard let b = try? STUNMessage(type: type, transactionID: req.transactionID, attributes: attrs)
            .serialized(integrityKey: signed ? key : nil) else { return }
        feed(b)
    }

    /// Allocation, peer A with permission and channel, peer B's permission pending.
    mutating func setUp() {
        client.allocate(now: now)
        drain(context: "allocate")
        answer([.realm(Realm(realm)), .nonce(Nonce("n1"))], error: (401, "Unauthorized"), signed: false)
        answer([.xorRelayedAddress(XORRelayedAddress(SocketAddress(ip: IPAddress("192.0.2.1")!, port: 50_000))),
                .xorMappedAddress(XORMappedAddress(SocketAddress(ip: IPAddress("198.51.100.1")!, port: 40_000))),
                .lifetime(Lifetime(seconds: 600))])
        client.send([1, 2, 3], to: peerA, now: now)
        drain(context: "send A")
        answer()  // CreatePermission
        let sent = lastSent.compactMap { try? STUNMessage.parse($0) }
        if let bind = sent.first(where: { $0.type == .channelBindRequest }) { answer(bind) }
        client.send([9], to: peerA, now: now)
        drain(context: "send A on the channel")
        invariant(lastSent.count == 1 && ChannelData.isChannelData(firstByte: lastSent[0][0]), "set-up did not bind a channel")
        client.send([4, 5], to: peerB, now: now)
        drain(context: "send B")
        invariant(client.state == .allocated, "set-up did not allocate")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var h = Harness()
    h.setUp()
    var steps = 0
    for piece in Pieces(inputBytes(data, size)) {
        steps += 1
        if steps > 64 { break }
        guard let op = piece.first else { continue }
        var body = Array(piece.dropFirst())
        switch op & 3 {
        case 0:
            h.feed(body)
        case 1, 2:
            if body.count >= 20, !h.recent.isEmpty {
                let id = h.recent[Int(op >> 2) % h.recent.count]
                for (i, w) in [id.w0, id.w1, id.w2].enumerated() {
                    body[8 + 4 * i] = UInt8(truncatingIfNeeded: w >> 24)
                    body[9 + 4 * i] = UInt8(truncatingIfNeeded: w >> 16)
                    body[10 + 4 * i] = UInt8(truncatingIfNeeded: w >> 8)
                    body[11 + 4 * i] = UInt8(truncatingIfNeeded: w)
                }
            }
            if op & 3 == 2, let m = try? STUNMessage.parse(body) {
                let plain = STUNMessage(type: m.type, transactionID: m.transactionID, attributes: m.attributes)
                if let signed = try? plain.serialized(integrityKey: key) { body = signed }
            }
            h.feed(body)
        default:
            switch (op >> 2) & 3 {
            case 0:
                let ms = body.count >= 2 ? Int64(body[0]) << 8 | Int64(body[1]) : 1000
                h.now = h.now + .milliseconds(ms * 50)
                h.client.handleTimeout(now: h.now)
                h.drain(context: "timeout")
            case 1:
                h.client.send(body, to: op & 0x10 == 0 ? peerA : peerB, now: h.now)
                h.drain(context: "send")
            case 2:
                h.client.refresh(now: h.now)
                h.drain(context: "refresh")
            default:
                let wasOver = h.over
                h.client.release(now: h.now)
                h.over = true
                h.released = true
                h.drain(context: "release")
                invariant(wasOver ? h.lastSent.isEmpty : h.lastSent.count <= 1, "release sent more than one Refresh")
            }
        }
    }
    return 0
}
