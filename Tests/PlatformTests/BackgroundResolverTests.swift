import Testing
import Foundation
import Wire
@testable import Platform

/// A gate a stand-in resolver blocks on. The wait is bounded (30 s) only so that a
/// broken build ends rather than hangs; passing tests always open it first.
final class Gate: @unchecked Sendable {
    let semaphore = DispatchSemaphore(value: 0)
    let lock = NSLock()
    var entered = 0
    var maxInside = 0
    var inside = 0
    var returned = 0

    func block() {
        lock.withLock { entered += 1; inside += 1; maxInside = max(maxInside, inside) }
        _ = semaphore.wait(timeout: .now() + 30)
        lock.withLock { inside -= 1; returned += 1 }
    }

    func open(_ n: Int) { for _ in 0..<n { semaphore.signal() } }
    var snapshot: (entered: Int, maxInside: Int, returned: Int) { lock.withLock { (entered, maxInside, returned) } }
}

/// Turns `loop` until `done()` (or 30 s, which only a broken test reaches).
func turn(_ loop: EventLoop, until done: () -> Bool) {
    let limit = MonotonicClock.now() + .seconds(30)
    while !done() && MonotonicClock.now() < limit { try? loop.runOnce(maxWait: .milliseconds(100)) }
}

/// Name lookups run off the loop.
@Suite struct BackgroundResolverTests {
    @Test func resultComesBackOnTheLoopNeverInsideResolve() throws {
        let loop = try EventLoop()
        let resolver = try BackgroundResolver(loop: loop)
        var got: [SocketAddress]? = nil
        let answer = SocketAddress(ip: .loopbackV4, port: 4242)
        resolver.resolve("signal.example", port: 4242, using: { (_: String, _: UInt16) throws(Resolver.Failure) -> [SocketAddress] in [answer] }) {
            got = try? $0.get()
        }
        #expect(got == nil)
        turn(loop) { got != nil }
        #expect(got == [answer])
        turn(loop) { resolver.threadsInUse == 0 }
        #expect(resolver.threadsInUse == 0)
    }

    /// A resolver that never answers: timers on the loop go on firing, a cancelled
    /// lookup's completion never runs, and no more than `maxThreads` threads ever block
    /// in it, however many lookups are asked for. Once the resolver answers again, the
    /// abandoned threads return and new lookups get threads.
    @Test func stuckLookupsAreBoundedAndDoNotHoldTheLoop() throws {
        let loop = try EventLoop()
        let resolver = try BackgroundResolver(loop: loop, maxThreads: 2)
        let gate = Gate()
        let stuck: BackgroundResolver.Lookup = { (host: String, _: UInt16) throws(Resolver.Failure) -> [SocketAddress] in
            gate.block()
            throw .notFound(host: host, reason: "released")
        }
        var delivered = 0
        var tickets: [BackgroundResolver.Ticket] = []
        for k in 0..<6 { tickets.append(resolver.resolve("host\(k).example", port: 80, using: stuck) { _ in delivered += 1 }) }
        var ticks = 0
        func tick() { loop.schedule(after: .milliseconds(5)) { ticks += 1; if ticks < 20 { tick() } } }
        tick()
        turn(loop) { ticks >= 20 }
        #expect(ticks == 20, "the loop's timers ran while every lookup was stuck")
        #expect(resolver.threadsInUse == 2 && resolver.queued == 4)
        #expect(gate.snapshot.maxInside <= 2)
        // The callers give up (their deadlines): all six are cancelled.
        for t in tickets { resolver.cancel(t) }
        #expect(resolver.queued == 0)
        gate.open(2)
        turn(loop) { resolver.threadsInUse == 0 }
        #expect(resolver.threadsInUse == 0 && delivered == 0)
        #expect(gate.snapshot == (entered: 2, maxInside: 2, returned: 2))
        // A working resolver again: a new lookup gets a thread and an answer.
        var answered = false
        resolver.resolve("again.example", port: 80, using: { (_: String, _: UInt16) throws(Resolver.Failure) -> [SocketAddress] in [] }) { _ in answered = true }
        turn(loop) { answered }
        #expect(answered)
    }
}
