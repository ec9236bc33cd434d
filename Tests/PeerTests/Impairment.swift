import Wire
import ICE
import DTLS
@testable import Peer
import SimulatedNetwork

// The impairment model (GilbertElliott, Impairment, PathCounters) and the network
// itself live in Tests/SimulatedNetwork, shared with the agent-core tests
// (Tests/AgentTests/ProviderWorld.swift); this file keeps the two-peer view of it the
// peer tests use.


/// Two peers on an impaired in-memory network with a manual clock.
///
/// Each peer may sit behind a NAT modelled as one endpoint-independent mapping of its
/// host address to a public address (initially the same address, so the signalled host
/// candidate is reachable). `rebind(offerer:)` moves the mapping to a new port: the
/// peer's datagrams then arrive from the new source, and datagrams sent to the old one
/// are dropped, as when a home router reboots or a mapping times out (RFC 4787 §4.3).
final class ImpairedNetwork {
    typealias InFlight = DatagramNetwork.InFlight

    let offerer: Peer
    let answerer: Peer
    let offererHost = SocketAddress("192.0.2.1:5000")!
    let answererHost = SocketAddress("198.51.100.2:6000")!
    /// The network underneath: the offerer is on its device side, the answerer on its
    /// provider side.
    let network: DatagramNetwork
    /// The public side of each peer's NAT mapping.
    var offererMapped: SocketAddress { network.mapped(offererHost)! }
    var answererMapped: SocketAddress { network.mapped(answererHost)! }
    var now: Instant {
        get { network.now }
        set { network.now = newValue }
    }
    /// `toAnswerer` is what happens to offerer → answerer datagrams, `toOfferer` the reverse.
    var toAnswerer: Impairment {
        get { network.up }
        set { network.up = newValue }
    }
    var toOfferer: Impairment {
        get { network.down }
        set { network.down = newValue }
    }
    var countersToAnswerer: PathCounters {
        get { network.upCounters }
        set { network.upCounters = newValue }
    }
    var countersToOfferer: PathCounters {
        get { network.downCounters }
        set { network.downCounters = newValue }
    }
    var inFlight: [InFlight] {
        get { network.inFlight }
        set { network.inFlight = newValue }
    }
    /// Every event with the simulated time it was drained at; true = offerer.
    var events: [(offerer: Bool, event: PeerEvent, at: Instant)] = []
    var deadlines: [Instant] = [.distantFuture, .distantFuture]
    /// Datagrams actually handed to a peer, by first byte class, for protocol checks
    /// (e.g. "no DTLS handshake after the restart").
    var deliveredLog: [(offerer: Bool, bytes: [UInt8], at: Instant)] = []
    var logDelivered = false

    init(seed: UInt64, answerTamper: ((String) -> String)? = nil, offerTamper: ((String) -> String)? = nil,
         configure: ((inout PeerConfiguration) -> Void)? = nil) throws {
        network = DatagramNetwork(seed: seed)
        // Initially each mapping keeps the host's address, so the signalled host
        // candidate is reachable.
        network.attach(offererHost, side: .device)
        network.attach(answererHost, side: .provider)
        let crypto = try CryptoRandom()
        var oc = PeerConfiguration(hostAddresses: [offererHost])
        var ac = PeerConfiguration(hostAddresses: [answererHost])
        configure?(&oc)
        configure?(&ac)
        offerer = try Peer(role: .offerer, configuration: oc, identity: try Identity(random: crypto), crypto: crypto, seed: network.rng.next())
        answerer = try Peer(role: .answerer, configuration: ac, identity: try Identity(random: crypto), crypto: crypto, seed: network.rng.next())
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
    func blackhole(for duration: Duration) { network.blackhole(for: duration) }

    /// The NAT in front of one peer picks a new public port.
    func rebind(offerer side: Bool) { network.rebind(side ? .device : .provider) }

    func random() -> Double { network.random() }

    func duration(below limit: Duration) -> Duration { network.duration(below: limit) }

    /// One datagram into the network: NAT out, impairment, in flight.
    func send(_ bytes: [UInt8], from: SocketAddress, to: SocketAddress, fromOfferer: Bool) {
        network.send(bytes, from: fromOfferer ? offererHost : answererHost, to: to, fromDevice: fromOfferer)
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
        guard let (local, side) = network.route(d) else { return }
        let toOffererSide = side == .device
        if logDelivered { deliveredLog.append((toOffererSide, d.bytes, now)) }
        peer(toOffererSide).handleInput(d.bytes, from: d.from, local: local, now: now)
    }

    /// Runs until `end`: delivers datagrams and fires timeouts in time order; `each` is
    /// called every `every` (an audio clock).
    func run(until end: Instant, every: Duration = .milliseconds(20), each: ((Instant) -> Void)? = nil) {
        var nextTick = now
        while now < end {
            let nextPacket = network.nextDue
            var next = min(nextPacket, deadlines[0], deadlines[1], end)
            if each != nil { next = min(next, nextTick) }
            now = max(now, next)
            if each != nil && now >= nextTick {
                each?(now)
                nextTick = nextTick + every
                drain()
            }
            for d in network.takeDue() { deliver(d) }
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
