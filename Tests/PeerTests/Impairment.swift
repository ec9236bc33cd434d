import Wire
import ICE
import DTLS
@testable import Peer

/// Gilbert–Elliott burst loss: a two-state Markov chain stepped once per datagram. In
/// Good a packet is lost with `lossInGood`, in Bad with `lossInBad`; `p` is P(Good→Bad),
/// `r` is P(Bad→Good). Stationary P(Bad) = p / (p + r); mean burst (Bad sojourn)
/// 1 / r packets.
struct GilbertElliott: Equatable {
    var p: Double
    var r: Double
    var lossInGood = 0.0
    var lossInBad = 1.0
    var bad = false

    /// Long-run loss rate, for checking the model against its definition.
    var expectedLoss: Double { (p * lossInBad + r * lossInGood) / (p + r) }
}

/// What one direction of the path does to datagrams. All randomness comes from the
/// network's seeded generator, so a seed replays the same run exactly.
struct Impairment {
    /// Independent (Bernoulli) loss probability.
    var loss = 0.0
    /// Burst loss on top of `loss`.
    var burst: GilbertElliott? = nil
    /// Fixed one-way delay plus a uniform jitter in [0, jitter).
    var delay: Duration = .milliseconds(1)
    var jitter: Duration = .zero
    /// With this probability a datagram is held back an extra `reorderDelay` (others
    /// overtake it).
    var reorder = 0.0
    var reorderDelay: Duration = .milliseconds(30)
    /// With this probability a datagram is delivered twice (the copy after `jitter`
    /// more).
    var duplicate = 0.0
}

/// Counters per direction.
struct PathCounters: Equatable {
    var sent = 0
    var delivered = 0
    var lost = 0
    var blackholed = 0
    var duplicated = 0
    var reordered = 0
    /// Datagrams addressed to a NAT mapping that no longer exists (after `rebind`).
    var staleMapping = 0
}

/// Two peers on an impaired in-memory network with a manual clock.
///
/// Each peer may sit behind a NAT modelled as one endpoint-independent mapping of its
/// host address to a public address (initially the same address, so the signalled host
/// candidate is reachable). `rebind(offerer:)` moves the mapping to a new port: the
/// peer's datagrams then arrive from the new source, and datagrams sent to the old one
/// are dropped, as when a home router reboots or a mapping times out (RFC 4787 §4.3).
final class ImpairedNetwork {
    struct InFlight { let due: Instant; let order: Int; let bytes: [UInt8]; let from: SocketAddress; let to: SocketAddress }

    let offerer: Peer
    let answerer: Peer
    let offererHost = SocketAddress("192.0.2.1:5000")!
    let answererHost = SocketAddress("198.51.100.2:6000")!
    /// The public side of each peer's NAT mapping.
    var offererMapped: SocketAddress
    var answererMapped: SocketAddress
    var now = Instant(nanoseconds: 10_000_000_000)
    var rng: SeededRandom
    /// `toAnswerer` is what happens to offerer → answerer datagrams, `toOfferer` the reverse.
    var toAnswerer = Impairment()
    var toOfferer = Impairment()
    var blackholeUntil: Instant? = nil
    var countersToAnswerer = PathCounters()
    var countersToOfferer = PathCounters()
    var inFlight: [InFlight] = []
    var order = 0
    /// Every event with the simulated time it was drained at; true = offerer.
    var events: [(offerer: Bool, event: PeerEvent, at: Instant)] = []
    var deadlines: [Instant] = [.distantFuture, .distantFuture]
    /// Datagrams actually handed to a peer, by first byte class, for protocol checks
    /// (e.g. "no DTLS handshake after the restart").
    var deliveredLog: [(offerer: Bool, bytes: [UInt8], at: Instant)] = []
    var logDelivered = false

    init(seed: UInt64, answerTamper: ((String) -> String)? = nil, offerTamper: ((String) -> String)? = nil,
         configure: ((inout PeerConfiguration) -> Void)? = nil) throws {
        rng = SeededRandom(seed: seed)
        offererMapped = offererHost
        answererMapped = answererHost
        let crypto = try CryptoRandom()
        var oc = PeerConfiguration(hostAddresses: [offererHost])
        var ac = PeerConfiguration(hostAddresses: [answererHost])
        configure?(&oc)
        configure?(&ac)
        offerer = try Peer(role: .offerer, configuration: oc, identity: try Identity(random: crypto), crypto: crypto, seed: rng.next())
        answerer = try Peer(role: .answerer, configuration: ac, identity: try Identity(random: crypto), crypto: crypto, seed: rng.next())
        offerer.start(now: now)
        answerer.start(now: now)
        drain()
        let offer = try offerer.createOffer()
        let answer = try answerer.acceptOffer(offerTamper?(offer) ?? offer, now: now)
        try offerer.setRemoteAnswer(answerTamper?(answer) ?? answer, now: now)
        drain()
    }

    func peer(_ offererSide: Bool) -> Peer { offererSide ? offerer : answerer }

    /// Drops everything, both ways, for `duration` from now (RFC 7675's "consent lost").
    func blackhole(for duration: Duration) { blackholeUntil = now + duration }

    /// The NAT in front of one peer picks a new public port.
    func rebind(offerer side: Bool) {
        if side {
            offererMapped = SocketAddress(ip: offererMapped.ip, port: offererMapped.port &+ 1)
        } else {
            answererMapped = SocketAddress(ip: answererMapped.ip, port: answererMapped.port &+ 1)
        }
    }

    func random() -> Double { Double(rng.next() >> 11) / Double(1 << 53) }

    func duration(below limit: Duration) -> Duration {
        guard limit.nanoseconds > 0 else { return .zero }
        return Duration(nanoseconds: Int64(rng.next() % UInt64(limit.nanoseconds)))
    }

    /// One datagram into the network: NAT out, impairment, in flight.
    func send(_ bytes: [UInt8], from: SocketAddress, to: SocketAddress, fromOfferer: Bool) {
        // The sender's NAT rewrites the source; the address it sends to is a public one.
        let source = fromOfferer ? offererMapped : answererMapped
        _ = from
        var c = fromOfferer ? countersToAnswerer : countersToOfferer
        var imp = fromOfferer ? toAnswerer : toOfferer
        defer {
            if fromOfferer { countersToAnswerer = c; toAnswerer = imp } else { countersToOfferer = c; toOfferer = imp }
        }
        c.sent += 1
        if let until = blackholeUntil, now < until { c.blackholed += 1; return }
        var lost = random() < imp.loss
        if var ge = imp.burst {
            // Step the chain, then draw the loss in the new state.
            if ge.bad { if random() < ge.r { ge.bad = false } } else { if random() < ge.p { ge.bad = true } }
            if random() < (ge.bad ? ge.lossInBad : ge.lossInGood) { lost = true }
            imp.burst = ge
        }
        if lost { c.lost += 1; return }
        var delay = imp.delay + duration(below: imp.jitter)
        if random() < imp.reorder {
            delay = delay + imp.reorderDelay
            c.reordered += 1
        }
        inFlight.append(InFlight(due: now + delay, order: order, bytes: bytes, from: source, to: to))
        order += 1
        if random() < imp.duplicate {
            c.duplicated += 1
            inFlight.append(InFlight(due: now + delay + duration(below: imp.jitter + .milliseconds(1)), order: order,
                                     bytes: bytes, from: source, to: to))
            order += 1
        }
    }

    func drain() {
        for side in [true, false] {
            let p = peer(side)
            loop: while true {
                switch p.pollOutput() {
                case .transmit(let bytes, let from, let to):
                    send(bytes, from: from, to: to, fromOfferer: side)
                case .event(let e):
                    events.append((side, e, now))
                case .timeout(let t):
                    deadlines[side ? 0 : 1] = t
                    break loop
                }
            }
        }
    }

    /// Delivers one datagram through the receiving NAT: only the current mapping exists.
    func deliver(_ d: InFlight) {
        let toOffererSide: Bool
        if d.to == offererMapped {
            toOffererSide = true
        } else if d.to == answererMapped {
            toOffererSide = false
        } else {
            if d.to.ip == offererMapped.ip { countersToOfferer.staleMapping += 1 } else { countersToAnswerer.staleMapping += 1 }
            return
        }
        if toOffererSide { countersToOfferer.delivered += 1 } else { countersToAnswerer.delivered += 1 }
        if logDelivered { deliveredLog.append((toOffererSide, d.bytes, now)) }
        let local = toOffererSide ? offererHost : answererHost
        peer(toOffererSide).handleInput(d.bytes, from: d.from, local: local, now: now)
    }

    /// Runs until `end`: delivers datagrams and fires timeouts in time order; `each` is
    /// called every `every` (an audio clock).
    func run(until end: Instant, every: Duration = .milliseconds(20), each: ((Instant) -> Void)? = nil) {
        var nextTick = now
        while now < end {
            let nextPacket = inFlight.min { ($0.due, $0.order) < ($1.due, $1.order) }?.due ?? .distantFuture
            var next = min(nextPacket, deadlines[0], deadlines[1], end)
            if each != nil { next = min(next, nextTick) }
            now = max(now, next)
            if each != nil && now >= nextTick {
                each?(now)
                nextTick = nextTick + every
                drain()
            }
            let due = inFlight.filter { $0.due <= now }.sorted { ($0.due, $0.order) < ($1.due, $1.order) }
            inFlight.removeAll { $0.due <= now }
            for d in due { deliver(d) }
            for side in [true, false] where deadlines[side ? 0 : 1] <= now {
                peer(side).handleTimeout(now: now)
            }
            drain()
        }
    }

    /// Runs until `condition` holds or `limit` passes; returns when it held (nil: never).
    @discardableResult
    func run(within limit: Duration, until condition: () -> Bool) -> Instant? {
        let end = now + limit
        while now < end {
            if condition() { return now }
            run(until: min(end, now + .milliseconds(10)))
        }
        return condition() ? now : nil
    }

    func firstEvent(_ offererSide: Bool, after t: Instant = .zero, _ match: (PeerEvent) -> Bool) -> Instant? {
        events.first { $0.offerer == offererSide && $0.at >= t && match($0.event) }?.at
    }

    func audio(_ offererSide: Bool) -> [ReceivedAudio] {
        events.compactMap { e in
            guard e.offerer == offererSide, case .audio(let a) = e.event else { return nil }
            return a
        }
    }

    func messages(_ offererSide: Bool) -> [(channel: UInt16, data: [UInt8], text: Bool)] {
        events.compactMap { e in
            guard e.offerer == offererSide, case .dataChannel(.message(let ch, let data, let text)) = e.event else { return nil }
            return (ch, data, text)
        }
    }

    func has(_ offererSide: Bool, _ event: PeerEvent) -> Bool {
        events.contains { $0.offerer == offererSide && $0.event == event }
    }

    /// Connects, then opens a channel from the offerer; returns its id.
    func connectWithChannel(label: String = "oai-events") throws -> UInt16 {
        let up = run(within: .seconds(10)) { has(true, .dataChannel(.connected)) && has(false, .dataChannel(.connected)) }
        guard up != nil else { throw TestFailure("the data-channel association did not come up") }
        let channel = try offerer.openChannel(label: label, now: now)
        drain()
        let opened = run(within: .seconds(10)) {
            events.contains { e in
                if !e.offerer, case .dataChannel(.opened(let ch, _, _)) = e.event { return ch == channel }
                return false
            }
        }
        guard opened != nil else { throw TestFailure("the channel did not open") }
        return channel
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}
