import FuzzSupport

// The SCTP association and data channels (RFC 9260, RFC 8831/8832) fed hostile packets
// mid-call: two DataChannels endpoints connect in memory (seeded, so the same every run),
// open a channel and exchange a message; then each input piece is sent to the DTLS
// server's side as a packet from its peer, with the verification tag and the CRC32c
// fixed up so it is not dropped at the door (an attacker who can inject into DTLS can
// compute both). Between pieces both sides run 200 ms of manual time and exchange
// whatever they send. Invariants: nothing traps, and outputs settle (no endless loop).

struct Endpoint {
    var channels: DataChannels
    var events: [DataChannelEvent] = []
}

func drain(_ from: inout Endpoint, into to: inout Endpoint, now: Instant, lastTag: inout UInt32?) -> Bool {
    var moved = false
    for _ in 0..<10_000 {
        switch from.channels.pollOutput() {
        case .transmit(let bytes):
            moved = true
            if bytes.count >= 8 {
                lastTag = UInt32(bytes[4]) << 24 | UInt32(bytes[5]) << 16 | UInt32(bytes[6]) << 8 | UInt32(bytes[7])
            }
            to.channels.handleInput(bytes, now: now)
        case .event(let e):
            from.events.append(e)
        case .timeout(let t):
            if t <= now { from.channels.handleTimeout(now: now); continue }
            return moved
        }
    }
    invariant(false, "outputs never settle")
    return moved
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var rng = SeededRandom(seed: 8261)
    var client = Endpoint(channels: DataChannels(config: DataChannelConfig(isDTLSClient: true), random: &rng))
    var server = Endpoint(channels: DataChannels(config: DataChannelConfig(isDTLSClient: false), random: &rng))
    var now = Instant(nanoseconds: 1_000_000_000)
    var serverTag: UInt32? = nil   // what the client writes: the server's own tag
    var clientTag: UInt32? = nil
    client.channels.connect(now: now)
    func exchange() {
        for _ in 0..<50 {
            let a = drain(&client, into: &server, now: now, lastTag: &serverTag)
            let b = drain(&server, into: &client, now: now, lastTag: &clientTag)
            if !a && !b { return }
        }
    }
    exchange()
    if let id = try? client.channels.open(label: "oai-events", now: now) {
        exchange()
        try? client.channels.send(id, text: "{\"type\":\"session.update\"}", now: now)
        exchange()
    }
    guard let tag = serverTag else { invariant(false, "no handshake"); return 0 }

    for piece in Pieces(inputBytes(data, size)) {
        var packet = piece
        if packet.count >= 12 {
            packet[4] = UInt8(truncatingIfNeeded: tag >> 24)
            packet[5] = UInt8(truncatingIfNeeded: tag >> 16)
            packet[6] = UInt8(truncatingIfNeeded: tag >> 8)
            packet[7] = UInt8(truncatingIfNeeded: tag)
            let sum = packet.withUnsafeBytes { SCTPPacket.checksum($0) }.byteSwapped
            packet[8] = UInt8(truncatingIfNeeded: sum >> 24)
            packet[9] = UInt8(truncatingIfNeeded: sum >> 16)
            packet[10] = UInt8(truncatingIfNeeded: sum >> 8)
            packet[11] = UInt8(truncatingIfNeeded: sum)
        }
        server.channels.handleInput(packet, now: now)
        exchange()
        now = now + .milliseconds(200)
        client.channels.handleTimeout(now: now)
        server.channels.handleTimeout(now: now)
        exchange()
    }
    return 0
}
