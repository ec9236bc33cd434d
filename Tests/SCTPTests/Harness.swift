import Testing
import Wire
@testable import SCTP

/// One output step of anything driven by the sans-IO contract.
enum Step<Event> {
    case transmit([UInt8])
    case event(Event)
    case timeout(Instant)
}

/// The drive contract, seen from tests: both `SCTPAssociation` and `DataChannels` fit it.
protocol Driven {
    associatedtype Event
    mutating func input(_ bytes: [UInt8], now: Instant)
    mutating func timeout(now: Instant)
    mutating func poll() -> Step<Event>
}

extension SCTPAssociation: Driven {
    mutating func input(_ bytes: [UInt8], now: Instant) { handleInput(bytes, now: now) }
    mutating func timeout(now: Instant) { handleTimeout(now: now) }
    mutating func poll() -> Step<SCTPEvent> {
        switch pollOutput() {
        case .transmit(let b): return .transmit(b)
        case .event(let e): return .event(e)
        case .timeout(let t): return .timeout(t)
        }
    }
}

/// A seeded network: loss, duplication, and reordering through random delay.
struct NetEm {
    struct Packet {
        var at: Instant
        var to: Int
        var order: Int
        var bytes: [UInt8]
    }
    var rng: SeededRandom
    /// Probability in 1/1000.
    var lossPerMille: UInt64 = 0
    var duplicatePerMille: UInt64 = 0
    var baseDelay: Duration = .milliseconds(20)
    /// Uniform extra delay; packets overtake each other when it exceeds their spacing.
    var jitter: Duration = .zero
    var queue: [Packet] = []
    var counter = 0
    var sent = 0
    var lost = 0
    var duplicated = 0
    /// Inspect or rewrite packets (nil drops); applied before loss.
    var tap: ((Int, [UInt8]) -> [UInt8]?)?

    init(seed: UInt64) { rng = SeededRandom(seed: seed) }

    mutating func send(_ bytes: [UInt8], to: Int, now: Instant) {
        sent += 1
        guard let bytes = tap.map({ $0(to, bytes) }) ?? bytes else { return }
        if rng.next() % 1000 < lossPerMille {
            lost += 1
            return
        }
        let copies = rng.next() % 1000 < duplicatePerMille ? 2 : 1
        if copies == 2 { duplicated += 1 }
        for _ in 0..<copies {
            var delay = baseDelay
            if jitter.nanoseconds > 0 { delay = delay + Duration(nanoseconds: Int64(rng.next() % UInt64(jitter.nanoseconds))) }
            counter += 1
            queue.append(Packet(at: now + delay, to: to, order: counter, bytes: bytes))
        }
    }

    var next: Instant? { queue.min(by: { ($0.at, $0.order) < ($1.at, $1.order) })?.at }

    mutating func due(_ now: Instant) -> [Packet] {
        let ready = queue.filter { $0.at <= now }.sorted { ($0.at, $0.order) < ($1.at, $1.order) }
        queue.removeAll { $0.at <= now }
        return ready
    }
}

/// Two endpoints, a network between them and a manual clock.
struct Pair<E: Driven> {
    var a: E
    var b: E
    var net: NetEm
    var now = Instant(nanoseconds: 1_000_000_000)
    var eventsA: [E.Event] = []
    var eventsB: [E.Event] = []
    var deadlineA = Instant.distantFuture
    var deadlineB = Instant.distantFuture
    var steps = 0

    init(a: E, b: E, net: NetEm) {
        self.a = a
        self.b = b
        self.net = net
    }

    mutating func drain() {
        while true {
            switch a.poll() {
            case .transmit(let p): net.send(p, to: 1, now: now); continue
            case .event(let e): eventsA.append(e); continue
            case .timeout(let t): deadlineA = t
            }
            break
        }
        while true {
            switch b.poll() {
            case .transmit(let p): net.send(p, to: 0, now: now); continue
            case .event(let e): eventsB.append(e); continue
            case .timeout(let t): deadlineB = t
            }
            break
        }
    }

    /// Runs until `done` holds or `limit` of simulated time passes; returns whether done.
    @discardableResult
    mutating func run(for limit: Duration, until done: (inout Pair<E>) -> Bool = { _ in false }) -> Bool {
        let end = now + limit
        drain()
        while true {
            if done(&self) { return true }
            var next = min(deadlineA, deadlineB)
            if let n = net.next, n < next { next = n }
            if next > end {
                now = end
                return done(&self)
            }
            if next > now { now = next }
            steps += 1
            for p in net.due(now) {
                if p.to == 0 { a.input(p.bytes, now: now) } else { b.input(p.bytes, now: now) }
                drain()
            }
            if deadlineA <= now { a.timeout(now: now) }
            if deadlineB <= now { b.timeout(now: now) }
            drain()
        }
    }
}
