/// The in-memory network the peer tests and the agent-core tests share: datagrams
/// between the device's side and the provider's side on a manual clock, with seeded
/// loss, delay, jitter, reordering and duplication per direction, black holes (both ways)
/// and NAT rebinding. Nothing here reads a clock or touches a socket; a seed replays a
/// run exactly.
///
/// NAT: every host socket attached to the network has a public address (the same as
/// the host's when it is not behind a NAT). What a host sends leaves from its public
/// address; what arrives is delivered only to a current public address. `rebind(side)`
/// moves every mapping of one side to a new port (a home router rebooted, a mapping
/// timed out: RFC 4787 §4.3): the peer's datagrams then come from the new source, and
/// datagrams sent to the old one vanish (counted as `staleMapping`, as are datagrams to
/// a socket that was detached).
import Wire

public final class DatagramNetwork {
    public enum Side: Sendable, Equatable {
        case device, provider
    }

    public struct InFlight: Sendable {
        public let due: Instant
        public let order: Int
        public let bytes: [UInt8]
        public let from: SocketAddress
        public let to: SocketAddress
    }

    struct Host {
        var side: Side
        var mapped: SocketAddress
    }

    public var now: Instant
    public var rng: SeededRandom
    /// What happens to device → provider datagrams, and to provider → device ones.
    public var up = Impairment()
    public var down = Impairment()
    public var upCounters = PathCounters()
    public var downCounters = PathCounters()
    /// Everything is dropped, both ways, until then (RFC 7675's "consent lost").
    public var blackholeUntil: Instant? = nil
    public var inFlight: [InFlight] = []
    var order = 0
    var hosts: [SocketAddress: Host] = [:]
    /// Public address → host, current mappings only.
    var byPublic: [SocketAddress: SocketAddress] = [:]
    /// How far `rebind` moves a mapping's port.
    public var rebindStep: UInt16 = 1
    public private(set) var rebinds = 0

    public init(seed: UInt64, now: Instant = Instant(nanoseconds: 10_000_000_000)) {
        rng = SeededRandom(seed: seed)
        self.now = now
    }

    // MARK: Hosts

    /// A socket on `side`, reachable at `mapped` (its own address when nil: no NAT).
    public func attach(_ host: SocketAddress, side: Side, mapped: SocketAddress? = nil) {
        let m = mapped ?? host
        hosts[host] = Host(side: side, mapped: m)
        byPublic[m] = host
    }

    /// The socket is closed: what is still sent to it vanishes.
    public func detach(_ host: SocketAddress) {
        guard let h = hosts.removeValue(forKey: host) else { return }
        if byPublic[h.mapped] == host { byPublic[h.mapped] = nil }
    }

    /// Where `host`'s datagrams appear to come from.
    public func mapped(_ host: SocketAddress) -> SocketAddress? { hosts[host]?.mapped }

    public var attachedHosts: Int { hosts.count }

    /// Every mapping on `side` moves `rebindStep` ports on.
    public func rebind(_ side: Side) {
        rebinds += 1
        for (host, h) in hosts where h.side == side {
            if byPublic[h.mapped] == host { byPublic[h.mapped] = nil }
            let moved = SocketAddress(ip: h.mapped.ip, port: h.mapped.port &+ rebindStep)
            hosts[host] = Host(side: side, mapped: moved)
            byPublic[moved] = host
        }
    }

    // MARK: Faults

    public func blackhole(for duration: Duration) { blackholeUntil = now + duration }

    public var blackholed: Bool { blackholeUntil.map { now < $0 } ?? false }

    // MARK: Randomness

    public func random() -> Double { Double(rng.next() >> 11) / Double(1 << 53) }

    public func duration(below limit: Duration) -> Duration {
        guard limit.nanoseconds > 0 else { return .zero }
        return Duration(nanoseconds: Int64(rng.next() % UInt64(limit.nanoseconds)))
    }

    // MARK: Carrying datagrams

    /// One datagram into the network from `host` (which side it is on picks the
    /// direction's impairment): NAT out, impairment, in flight.
    public func send(_ bytes: [UInt8], from host: SocketAddress, to: SocketAddress) {
        let sender = hosts[host]
        send(bytes, from: host, to: to, fromDevice: (sender?.side ?? .device) == .device)
    }

    /// The same with the direction given (the host may not be attached).
    public func send(_ bytes: [UInt8], from host: SocketAddress, to: SocketAddress, fromDevice: Bool) {
        // The sender's NAT rewrites the source; the address it sends to is a public one.
        let source = hosts[host]?.mapped ?? host
        var c = fromDevice ? upCounters : downCounters
        var imp = fromDevice ? up : down
        defer {
            if fromDevice { upCounters = c; up = imp } else { downCounters = c; down = imp }
        }
        c.sent += 1
        if blackholed { c.blackholed += 1; return }
        // The order of the draws is part of the seed's meaning: keep it.
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

    /// When the next datagram lands (`.distantFuture`: none in flight).
    public var nextDue: Instant {
        var t = Instant.distantFuture
        for d in inFlight where d.due < t { t = d.due }
        return t
    }

    /// The datagrams due by `now`, in the order they land, taken out of the network.
    public func takeDue() -> [InFlight] {
        guard inFlight.contains(where: { $0.due <= now }) else { return [] }
        let due = inFlight.filter { $0.due <= now }.sorted { ($0.due, $0.order) < ($1.due, $1.order) }
        inFlight.removeAll { $0.due <= now }
        return due
    }

    /// The receiving NAT: the host socket a landed datagram goes to and its side, or nil
    /// (no current mapping: counted as stale on the side the address belongs to).
    public func route(_ d: InFlight) -> (host: SocketAddress, side: Side)? {
        guard let host = byPublic[d.to], let h = hosts[host] else {
            let deviceSide = hosts.values.contains { $0.side == .device && $0.mapped.ip == d.to.ip }
            if deviceSide { downCounters.staleMapping += 1 } else { upCounters.staleMapping += 1 }
            return nil
        }
        if h.side == .device { downCounters.delivered += 1 } else { upCounters.delivered += 1 }
        return (host, h.side)
    }
}
