import CSystem
import Wire

/// A counter the kernel can poll: one thread (a real-time audio thread, a signal) calls
/// `signal()`, the loop sees the descriptor readable and calls `drain()`.
///
/// `signal()` is a single `write(2)` of eight bytes and is safe on a real-time thread
/// (ARCHITECTURE.md "Threads": the one syscall besides ALSA's they may make).
/// Sendable: its one stored property is immutable and eventfd reads and writes are
/// atomic in the kernel, so any thread may signal it.
public final class EventFD: @unchecked Sendable {
    public let fd: Int32

    public init() throws(SystemError) {
        fd = try sys("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) }
    }

    deinit { closeDescriptor(fd) }

    @inline(__always)
    public func signal() {
        var one: UInt64 = 1
        _ = write(fd, &one, 8)
    }

    /// Reads and resets the counter; returns how many signals were pending.
    @discardableResult
    public func drain() -> UInt64 {
        var value: UInt64 = 0
        let n = read(fd, &value, 8)
        return n == 8 ? value : 0
    }
}

/// The one loop of the process: `poll(2)` over registered descriptors, a timerfd armed
/// to the earliest timer, and an eventfd for wake-ups from other threads.
///
/// Drive contract for the sans-IO cores it serves: on readable input call the core's
/// `handleInput`, at its deadline `handleTimeout`, and after either drain its
/// `pollOutput()` until it returns `.timeout`, then `schedule` that deadline here.
///
/// Not thread-safe except `wake()`: everything else runs on the loop's thread.
public final class EventLoop {
    public typealias Handler = (_ revents: Int16) -> Void

    public struct SourceID: Hashable, Sendable { let raw: Int }
    public struct TimerID: Hashable, Sendable { let raw: Int }

    struct Source {
        let id: Int
        let fd: Int32
        var events: Int16
        let handler: Handler
    }

    struct Timer {
        let id: Int
        let deadline: Instant
        let handler: () -> Void
    }

    private var sources: [Source] = []
    private var timers: [Timer] = []
    /// Scratch arrays of `runOnce` and `fireDueTimers`, kept between turns so a turn
    /// allocates nothing (three fresh arrays a turn would be ~190 allocations per
    /// call-second). Each is taken out (swapped with an empty array) while in use, so
    /// a handler that runs the loop again gets fresh ones instead of sharing them.
    private var pollScratch: [pollfd] = []
    private var idScratch: [Int] = []
    private var dueScratch: [Timer] = []
    private var nextID = 1
    private let timerFD: Int32
    private let wakeEvent: EventFD
    private var armedDeadline: Instant? = nil
    private var stopping = false
    /// Times the loop has turned (returned from poll and dispatched); the watchdog
    /// reads it to know the loop is alive.
    public private(set) var turns: UInt64 = 0

    public init() throws(SystemError) {
        timerFD = try sys("timerfd_create") { timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK | TFD_CLOEXEC)) }
        do throws(SystemError) {
            wakeEvent = try EventFD()
        } catch {
            closeDescriptor(timerFD)
            throw error
        }
    }

    deinit { closeDescriptor(timerFD) }

    public var now: Instant { MonotonicClock.now() }

    /// Calls `handler` with the returned events whenever `fd` polls with any of `events`
    /// (`POLLIN`, `POLLOUT`, …). Errors and hang-ups are always reported.
    @discardableResult
    public func watch(fd: Int32, events: Int16 = Int16(POLLIN), _ handler: @escaping Handler) -> SourceID {
        let id = nextID
        nextID += 1
        sources.append(Source(id: id, fd: fd, events: events, handler: handler))
        return SourceID(raw: id)
    }

    /// Changes the events watched for a source (e.g. add `POLLOUT` while a send is queued).
    public func update(_ source: SourceID, events: Int16) {
        if let i = sources.firstIndex(where: { $0.id == source.raw }) { sources[i].events = events }
    }

    public func unwatch(_ source: SourceID) {
        sources.removeAll { $0.id == source.raw }
    }

    /// Runs `handler` once, on the loop, at or after `deadline` (monotonic).
    @discardableResult
    public func schedule(at deadline: Instant, _ handler: @escaping () -> Void) -> TimerID {
        let id = nextID
        nextID += 1
        timers.append(Timer(id: id, deadline: deadline, handler: handler))
        return TimerID(raw: id)
    }

    @discardableResult
    public func schedule(after delay: Duration, _ handler: @escaping () -> Void) -> TimerID {
        schedule(at: now + delay, handler)
    }

    public func cancel(_ timer: TimerID) {
        timers.removeAll { $0.id == timer.raw }
    }

    public var pendingTimers: Int { timers.count }

    /// Wakes a `poll` in progress; callable from any thread.
    public func wake() { wakeEvent.signal() }

    /// Makes `run()` return after the current turn.
    public func stop() {
        stopping = true
        wake()
    }

    /// Forgets every watched descriptor and timer, and with them the handlers: what a
    /// handler captured (the runtime, a session, a connection, which themselves hold the
    /// loop) is released. Called when a command is done with its loop, so nothing it
    /// made outlives it in a reference cycle (LeakSanitizer checks it in CI).
    public func close() {
        // Taken out first, released after: a handler's captures may `unwatch` or
        // `cancel` from their deinit while they go, which must find the loop's own
        // arrays free (and, by then, empty).
        var oldSources: [Source] = []
        var oldTimers: [Timer] = []
        swap(&oldSources, &sources)
        swap(&oldTimers, &timers)
        pollScratch.removeAll()
        idScratch.removeAll()
        dueScratch.removeAll()
        oldSources.removeAll()
        oldTimers.removeAll()
    }

    /// Turns until `stop()` is called.
    public func run() throws(SystemError) {
        stopping = false
        while !stopping {
            try runOnce()
        }
    }

    /// One turn: waits (at most `maxWait`, nil = until something happens) for a
    /// descriptor or the earliest timer, then dispatches what is ready. Due timers fire
    /// in deadline order.
    public func runOnce(maxWait: Duration? = nil) throws(SystemError) {
        try armTimer()
        var fds: [pollfd] = []
        swap(&fds, &pollScratch)
        var ids: [Int] = []
        swap(&ids, &idScratch)
        defer {
            fds.removeAll(keepingCapacity: true)
            ids.removeAll(keepingCapacity: true)
            swap(&fds, &pollScratch)
            swap(&ids, &idScratch)
        }
        fds.reserveCapacity(sources.count + 2)
        fds.append(pollfd(fd: timerFD, events: Int16(POLLIN), revents: 0))
        fds.append(pollfd(fd: wakeEvent.fd, events: Int16(POLLIN), revents: 0))
        for s in sources {
            fds.append(pollfd(fd: s.fd, events: s.events, revents: 0))
            ids.append(s.id)
        }
        var timeoutMS: Int32 = -1
        if let w = maxWait { timeoutMS = Int32(clamping: max(0, (w.nanoseconds + 999_999) / 1_000_000)) }
        let ready = try fds.withUnsafeMutableBufferPointer { (p: inout UnsafeMutableBufferPointer<pollfd>) throws(SystemError) -> Int32 in
            do throws(SystemError) {
                return try sys("poll") { poll(p.baseAddress, nfds_t(p.count), timeoutMS) }
            } catch {
                // A signal interrupting poll is not an error: just turn again.
                if error.code == EINTR { return 0 }
                throw error
            }
        }
        turns &+= 1
        if fds[1].revents != 0 { wakeEvent.drain() }
        if fds[0].revents != 0 {
            var expirations: UInt64 = 0
            _ = read(timerFD, &expirations, 8)
            armedDeadline = nil
        }
        fireDueTimers()
        guard ready > 0 else { return }
        for (k, id) in ids.enumerated() {
            let revents = fds[k + 2].revents
            guard revents != 0 else { continue }
            // A handler may have removed this source (or others) meanwhile.
            guard let s = sources.first(where: { $0.id == id }) else { continue }
            s.handler(revents)
        }
    }

    private func fireDueTimers() {
        let t = now
        var due: [Timer] = []
        swap(&due, &dueScratch)
        defer {
            due.removeAll(keepingCapacity: true)
            swap(&due, &dueScratch)
        }
        for timer in timers where timer.deadline <= t { due.append(timer) }
        guard !due.isEmpty else { return }
        timers.removeAll { $0.deadline <= t }
        due.sort { $0.deadline < $1.deadline }
        for timer in due { timer.handler() }
    }

    private func armTimer() throws(SystemError) {
        guard let earliest = timers.min(by: { $0.deadline < $1.deadline })?.deadline else {
            if armedDeadline != nil {
                var off = itimerspec()
                _ = try sys("timerfd_settime") { timerfd_settime(timerFD, 0, &off, nil) }
                armedDeadline = nil
            }
            return
        }
        if armedDeadline == earliest { return }
        // An absolute deadline already past still fires at once: clamp to 1 ns, since
        // an all-zero it_value would disarm the timer instead.
        let ns = max(earliest.nanoseconds, 1)
        var spec = itimerspec()
        spec.it_value.tv_sec = time_t(ns / 1_000_000_000)
        spec.it_value.tv_nsec = Int(ns % 1_000_000_000)
        _ = try sys("timerfd_settime") { timerfd_settime(timerFD, Int32(TFD_TIMER_ABSTIME), &spec, nil) }
        armedDeadline = earliest
    }
}

/// The timer of one sans-IO machine on the loop: the machine's last `.timeout(t)` is
/// armed here, re-armed only when `t` changes, and `fire` runs at it (after which the
/// owner calls the machine's `handleTimeout` and drains it again, re-arming). Every
/// driver of a `handle`/`pollOutput`/`.timeout` contract uses one of these rather than
/// its own copy of the bookkeeping.
public final class DeadlineTimer {
    let loop: EventLoop
    let fire: () -> Void
    var timer: EventLoop.TimerID?
    public private(set) var deadline = Instant.distantFuture

    public init(loop: EventLoop, fire: @escaping () -> Void) {
        self.loop = loop
        self.fire = fire
    }

    /// Wants `fire` at `deadline` (`distantFuture`: never).
    public func arm(_ deadline: Instant) {
        guard deadline != self.deadline else { return }
        cancel()
        self.deadline = deadline
        guard deadline < .distantFuture else { return }
        timer = loop.schedule(at: deadline) { [self] in
            self.timer = nil
            self.deadline = .distantFuture
            self.fire()
        }
    }

    public func cancel() {
        if let timer { loop.cancel(timer) }
        timer = nil
        deadline = .distantFuture
    }
}

/// How much one readable descriptor may take of one turn of the loop. The loop is
/// level-triggered (`poll`): a handler that stops with data still waiting is called
/// again at the next turn, after the timers and every other ready descriptor (the audio
/// eventfds, the signal pipe) have had theirs. A handler that reads until `EAGAIN`
/// instead never returns while a peer keeps the socket full, and starves all of them:
/// no audio, no `WATCHDOG=1`, no SIGTERM (a flood of empty RFC 4571 frames or TURN
/// ChannelData did exactly that).
public enum ReadBudget {
    /// Datagrams a UDP socket's handler reads per turn: a call brings 50–100 a second.
    public static let datagrams = 64
    /// Bytes a stream socket's handler reads per turn.
    public static let streamBytes = 64 * 1024
    /// Connections a listening socket's handler accepts per turn.
    public static let accepts = 16
}
