import Testing
import Foundation
import Wire
import Platform
@testable import Devices

/// Virtual time for the audio threads and their stand-in devices, the way swift-nio's
/// embedded event loop runs I/O on time the test moves: a thread that must wait (a
/// fake device for its hardware, a pacer, the playback thread's just-in-time sleep)
/// blocks here until virtual time reaches its deadline, and time moves only in
/// `run`, on the test's thread, once every audio thread of the test is waiting. So a
/// run does the same thing however fast the machine is, sanitizer or not, and takes
/// no longer than the threads take to compute.
///
/// What it gives up: the threads only run between two waits, so the audio threads and
/// the loop never really race each other here (threads woken at the same instant do
/// run together). The rings and the hook chain are raced for real in their own tests.
final class VirtualClock: @unchecked Sendable {
    /// Where virtual time starts: any instant would do; not zero, so a stray zero
    /// stands out.
    static let origin: Int64 = 1_000_000_000_000
    /// Threads that can wait at once.
    static let slots = 8

    /// A pthread mutex and conditions, which ThreadSanitizer sees (see FakeAir):
    /// `arrived` for the driver (a thread came to wait), `moved` for the threads (time
    /// moved, or the clock was let go). Both are waited on with a timeout and the
    /// predicate read again: a run once hung here with a thread asleep in
    /// `pthread_cond_wait` after the broadcast that should have woken it. Debian 12's
    /// glibc 2.36 predates the fix for lost condition-variable wake-ups (sourceware bug
    /// 25847, fixed in 2.41), the likely cause; the timeout turns such a lost wake-up into
    /// a few milliseconds of real time instead of a hung suite.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let arrived: UnsafeMutablePointer<pthread_cond_t>
    private let moved: UnsafeMutablePointer<pthread_cond_t>
    private var time = VirtualClock.origin
    /// Let go (the test is ending): every wait returns at once, false, and time stops.
    private var released = false
    /// Fixed slots, so a wait allocates nothing: the audio threads' allocations are
    /// counted between device calls, and their own sleeps wait here too. A free
    /// slot's deadline is `Int64.min`.
    private let deadlines: UnsafeMutablePointer<Int64>
    private let letGo: UnsafeMutablePointer<Bool>
    private var waiting = 0
    /// Things the test does at a virtual instant (test thread only).
    private var actions: [(at: Int64, body: () -> Void)] = []

    init() {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        arrived = .allocate(capacity: 1)
        pthread_cond_init(arrived, &attributes)
        moved = .allocate(capacity: 1)
        pthread_cond_init(moved, &attributes)
        pthread_condattr_destroy(&attributes)
        deadlines = .allocate(capacity: Self.slots)
        deadlines.initialize(repeating: .min, count: Self.slots)
        letGo = .allocate(capacity: Self.slots)
        letGo.initialize(repeating: false, count: Self.slots)
    }

    deinit {
        pthread_cond_destroy(arrived)
        arrived.deallocate()
        pthread_cond_destroy(moved)
        moved.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        deadlines.deallocate()
        letGo.deallocate()
    }

    /// The clock to give the threads under test. It holds this object unretained: the
    /// test keeps it alive until the threads are stopped.
    var device: DeviceClock {
        DeviceClock(context: Unmanaged.passUnretained(self).toOpaque(),
                    now: { Unmanaged<VirtualClock>.fromOpaque($0!).takeUnretainedValue().nanoseconds },
                    waitUntil: { context, deadline in
                        _ = Unmanaged<VirtualClock>.fromOpaque(context!).takeUnretainedValue().wait(until: deadline)
                    })
    }

    var nanoseconds: Int64 {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return time
    }

    var now: Instant { Instant(nanoseconds: nanoseconds) }

    /// Whether the clock was let go (`release`): a device then returns at once.
    var isReleased: Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return released
    }

    /// Blocks until virtual time reaches `deadline`. False if the clock was let go
    /// first: the test is ending, and a device returns at once (-EINTR) so the thread
    /// gets back to its loop and sees it was stopped.
    @discardableResult
    func wait(until deadline: Int64) -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        if released { return false }
        if time >= deadline { return true }
        var slot = 0
        while deadlines[slot] != .min { slot += 1; precondition(slot < Self.slots, "more waiting threads than slots") }
        deadlines[slot] = deadline
        letGo[slot] = false
        waiting += 1
        pthread_cond_broadcast(arrived)
        while !letGo[slot] && !released { timedWait(moved, milliseconds: 5) }
        let reached = letGo[slot]
        if !reached { waiting -= 1 }
        deadlines[slot] = .min
        return reached
    }

    /// Runs `body` on the test's thread (in `run`) when virtual time reaches `delay`
    /// from now, once the threads due at that instant have run and wait again.
    func schedule(after delay: Duration, _ body: @escaping () -> Void) {
        actions.append((nanoseconds + delay.nanoseconds, body))
    }

    /// Moves time until `done()`: each step waits until all `threads` wait here, turns
    /// `loop` once without blocking (it handles what the threads signalled: the
    /// playback ring's top-up, captured frames), runs the actions due, asks `done`,
    /// then moves time to the earliest deadline (a thread's or an action's) and lets go
    /// of every thread waiting for it. Returns the virtual time it ran for; records an
    /// issue (and returns) if the threads stop waiting here for a minute of real time,
    /// which only a hung thread does.
    @discardableResult
    func run(threads: Int, loop: EventLoop? = nil, until done: () -> Bool) throws -> Duration {
        let from = nanoseconds
        while true {
            guard allWaiting(threads) else {
                Issue.record("the audio threads did not all come to wait on the virtual clock")
                return .nanoseconds(nanoseconds - from)
            }
            try loop?.runOnce(maxWait: .zero)
            let t = nanoseconds
            while let i = actions.indices.filter({ actions[$0].at <= t }).min(by: { actions[$0].at < actions[$1].at }) {
                actions.remove(at: i).body()
            }
            if done() { return .nanoseconds(t - from) }
            pthread_mutex_lock(mutex)
            var next = actions.map(\.at).min() ?? .max
            for s in 0..<Self.slots where deadlines[s] != .min && !letGo[s] { next = min(next, deadlines[s]) }
            precondition(next != .max, "nothing to wait for")
            time = max(time, next)
            for s in 0..<Self.slots where deadlines[s] != .min && !letGo[s] && deadlines[s] <= time {
                letGo[s] = true
                waiting -= 1
            }
            pthread_cond_broadcast(moved)
            pthread_mutex_unlock(mutex)
        }
    }

    /// Lets every thread go, now and from now on (before stopping them).
    func release() {
        pthread_mutex_lock(mutex)
        released = true
        pthread_cond_broadcast(moved)
        pthread_mutex_unlock(mutex)
    }

    private func allWaiting(_ threads: Int) -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        var start = timespec()
        clock_gettime(CLOCK_MONOTONIC, &start)
        while waiting < threads {
            timedWait(arrived, milliseconds: 5)
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            if now.tv_sec - start.tv_sec >= 60 { return false }
        }
        return true
    }

    /// Waits on `condition` (the mutex held) until woken or `milliseconds` of real time.
    private func timedWait(_ condition: UnsafeMutablePointer<pthread_cond_t>, milliseconds: Int) {
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        deadline.tv_nsec += milliseconds * 1_000_000
        if deadline.tv_nsec >= 1_000_000_000 {
            deadline.tv_sec += 1
            deadline.tv_nsec -= 1_000_000_000
        }
        pthread_cond_timedwait(condition, mutex, &deadline)
    }
}
