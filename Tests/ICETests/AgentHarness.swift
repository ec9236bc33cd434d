import Testing
@testable import ICE
import Wire

/// A seeded in-memory network: per-datagram loss, a delay drawn from a range (which
/// reorders), optional duplication, and a switch that drops everything (a blackhole).
struct NetworkEmulator {
    struct Datagram {
        var at: Instant
        var seq: Int
        var bytes: [UInt8]
        var from: SocketAddress
        var to: SocketAddress
    }

    var rng: SeededRandom
    var loss: Double = 0
    var minDelay: Duration = .milliseconds(10)
    var maxDelay: Duration = .milliseconds(30)
    var duplicate: Double = 0
    var blackhole = false
    var inFlight: [Datagram] = []
    var seq = 0
    var sent = 0
    var dropped = 0

    init(seed: UInt64) { rng = SeededRandom(seed: seed) }

    mutating func uniform() -> Double { Double(rng.next() >> 11) / Double(1 << 53) }

    mutating func send(_ bytes: [UInt8], from: SocketAddress, to: SocketAddress, now: Instant) {
        sent += 1
        if blackhole || uniform() < loss {
            dropped += 1
            return
        }
        let copies = uniform() < duplicate ? 2 : 1
        for _ in 0..<copies {
            let span = (maxDelay - minDelay).nanoseconds
            let delay = minDelay + Duration(nanoseconds: span > 0 ? Int64(rng.next() % UInt64(span)) : 0)
            seq += 1
            inFlight.append(Datagram(at: now + delay, seq: seq, bytes: bytes, from: from, to: to))
        }
    }

    var nextDelivery: Instant? { inFlight.map(\.at).min() }

    mutating func due(_ now: Instant) -> [Datagram] {
        let ready = inFlight.filter { $0.at <= now }.sorted { ($0.at, $0.seq) < ($1.at, $1.seq) }
        inFlight.removeAll { $0.at <= now }
        return ready
    }
}

/// Two agents, A at 10.0.0.1:5000 and B at 10.0.0.2:6000, on a manual clock, plus an
/// optional STUN server at 198.51.100.1:3478 that maps A behind a NAT address.
struct TwoAgents {
    static let addressA = SocketAddress("10.0.0.1:5000")!
    static let addressB = SocketAddress("10.0.0.2:6000")!
    static let stunServer = SocketAddress("198.51.100.1:3478")!
    static let natA = SocketAddress("203.0.113.9:41000")!
    static let credentialsA = ICECredentials(ufrag: "aUfr", password: "passwordOfAgentA0123456")
    static let credentialsB = ICECredentials(ufrag: "bUf/", password: "passwordOfAgentB0123456")

    var a: ICEAgent<SeededRandom>
    var b: ICEAgent<SeededRandom>
    var net: NetworkEmulator
    var now = Instant.zero
    var deadlineA = Instant.zero
    var deadlineB = Instant.zero
    var eventsA: [(Instant, ICEEvent)] = []
    var eventsB: [(Instant, ICEEvent)] = []
    /// Every datagram either agent handed to the network, with its send time.
    var wire: [(Instant, NetworkEmulator.Datagram)] = []
    /// Every datagram delivered to an agent, with its arrival time.
    var delivered: [(Instant, NetworkEmulator.Datagram)] = []

    var hostsA: [SocketAddress]
    var hostsB: [SocketAddress]
    /// B behind a one-to-one NAT: what B sends from `inside` leaves from `outside`, what
    /// arrives at `outside` reaches B at `inside`, and `inside` cannot be reached from A.
    var natB: (inside: SocketAddress, outside: SocketAddress)? = nil

    init(roleA: ICERole = .controlling, roleB: ICERole = .controlled, seed: UInt64 = 1,
         tieBreakerA: UInt64? = nil, tieBreakerB: UInt64? = nil, configA: ICEConfig = ICEConfig(),
         configB: ICEConfig = ICEConfig(), hostsA: [SocketAddress] = [addressA], hostsB: [SocketAddress] = [addressB]) {
        self.hostsA = hostsA
        self.hostsB = hostsB
        a = ICEAgent(role: roleA, localCredentials: Self.credentialsA, hostAddresses: hostsA,
                     config: configA, rng: SeededRandom(seed: seed &* 31 &+ 1), tieBreaker: tieBreakerA)
        b = ICEAgent(role: roleB, localCredentials: Self.credentialsB, hostAddresses: hostsB,
                     config: configB, rng: SeededRandom(seed: seed &* 31 &+ 2), tieBreaker: tieBreakerB)
        net = NetworkEmulator(seed: seed)
    }

    /// Starts both and exchanges credentials and host candidates (as signaling would).
    mutating func connectSignaling() {
        a.start(now: now)
        b.start(now: now)
        a.setRemoteCredentials(Self.credentialsB, now: now)
        b.setRemoteCredentials(Self.credentialsA, now: now)
        for c in b.localCandidates { a.addRemoteCandidate(c, now: now) }
        for c in a.localCandidates { b.addRemoteCandidate(c, now: now) }
        drain()
    }

    mutating func drain() {
        drainLoopA: while true {
            switch a.pollOutput() {
            case .transmit(let bytes, let from, let to):
                wire.append((now, .init(at: now, seq: 0, bytes: bytes, from: from, to: to)))
                net.send(bytes, from: from, to: to, now: now)
            case .event(let e): eventsA.append((now, e))
            case .timeout(let t):
                deadlineA = t
                break drainLoopA
            }
        }
        drainLoopB: while true {
            switch b.pollOutput() {
            case .transmit(let bytes, var from, let to):
                if let nat = natB, from == nat.inside { from = nat.outside }
                wire.append((now, .init(at: now, seq: 0, bytes: bytes, from: from, to: to)))
                net.send(bytes, from: from, to: to, now: now)
            case .event(let e): eventsB.append((now, e))
            case .timeout(let t):
                deadlineB = t
                break drainLoopB
            }
        }
    }

    /// Runs the world until `end` (or until `stop` holds after a step).
    mutating func run(until end: Instant, stop: (TwoAgents) -> Bool = { _ in false }) {
        drain()
        while true {
            var next = min(deadlineA, deadlineB)
            if let d = net.nextDelivery, d < next { next = d }
            if next > end {
                now = end
                return
            }
            now = max(now, next)
            for var d in net.due(now) {
                if let nat = natB {
                    // A private address is not routed from A's side of the NAT.
                    if d.to == nat.inside { continue }
                    if d.to == nat.outside { d.to = nat.inside }
                }
                delivered.append((now, d))
                if hostsA.contains(d.to) {
                    a.handleInput(d.bytes, from: d.from, local: d.to, now: now)
                } else if hostsB.contains(d.to) {
                    b.handleInput(d.bytes, from: d.from, local: d.to, now: now)
                } else if d.to == Self.stunServer {
                    answerAsSTUNServer(d)
                }
            }
            if deadlineA <= now { a.handleTimeout(now: now) }
            if deadlineB <= now { b.handleTimeout(now: now) }
            drain()
            if stop(self) { return }
        }
    }

    mutating func run(for d: Duration) { run(until: now + d) }

    /// A plain RFC 8489 server: Binding success with XOR-MAPPED-ADDRESS, no integrity;
    /// A appears as `natA`.
    mutating func answerAsSTUNServer(_ d: NetworkEmulator.Datagram) {
        guard let m = try? STUNMessage.parse(d.bytes), m.type == .bindingRequest else { return }
        let mapped = d.from == Self.addressA ? Self.natA : d.from
        let reply = STUNMessage(type: .bindingSuccess, transactionID: m.transactionID,
                                attributes: [.xorMappedAddress(XORMappedAddress(mapped))])
        net.send(try! reply.serialized(fingerprint: true), from: Self.stunServer, to: d.from, now: now)
    }

    static func firstTime(_ events: [(Instant, ICEEvent)], _ e: ICEEvent, after: Instant = .zero) -> Instant? {
        events.first { $0.0 >= after && $0.1 == e }?.0
    }

    var bothConnected: Bool { a.state == .connected && b.state == .connected }
}

extension TwoAgents {
    /// Arrival time of the last Binding success response delivered to `address`.
    func lastSuccessDelivered(to address: SocketAddress) -> Instant? {
        delivered.last { $0.1.to == address && (try? STUNMessage.parse($0.1.bytes))?.type == .bindingSuccess }?.0
    }

    /// Send times of Binding requests from `address` (first transmissions and retransmissions).
    func requestsSent(from address: SocketAddress) -> [(Instant, STUNMessage)] {
        wire.compactMap { e in
            guard e.1.from == address, let m = try? STUNMessage.parse(e.1.bytes), m.type == .bindingRequest else { return nil }
            return (e.0, m)
        }
    }
}
