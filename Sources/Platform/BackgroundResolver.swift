import CSystem
import Synchronization
import Wire

/// Name lookups off the loop. getaddrinfo blocks, and cannot be interrupted: a resolver
/// that stops answering held the loop for 10 s a lookup (audio lost, `WATCHDOG=1`
/// withheld, the final DELETE past `TimeoutStopSec`). Here each lookup runs on a thread
/// of its own and its result comes back to the loop through an eventfd, so the loop
/// keeps turning and the caller's deadline (a timer on the loop) decides when to give
/// up.
///
/// Design decisions:
/// - The system resolver stays (getaddrinfo: /etc/hosts, nsswitch, IPv6 all apply);
///   an own DNS client would lose those.
/// - One thread per lookup, detached, started on demand: a few lookups per session do
///   not justify a resident pool. At most `maxThreads` run at once; more lookups wait
///   on the loop side for a free thread (or their caller's deadline).
/// - A cancelled lookup whose thread is stuck in getaddrinfo is abandoned: its result
///   is dropped when (if ever) it comes, and nothing the loop waits for depends on it.
///   Its thread keeps its slot until it returns, which is what bounds the pile-up: at
///   most `maxThreads` threads ever block in a resolver that never answers.
/// - The worker thread touches only its own `Job` (written before a release store of
///   `done`, read by the loop after an acquire load) and the eventfd.
///
/// Loop thread only, except what the worker threads do inside `Job`.
public final class BackgroundResolver {
    /// The lookup a thread runs: `Resolver.resolve`, or a test's stand-in.
    public typealias Lookup = (String, UInt16) throws(Resolver.Failure) -> [SocketAddress]
    public typealias Completion = (Result<[SocketAddress], Resolver.Failure>) -> Void

    public struct Ticket: Hashable, Sendable { let raw: Int }

    /// One lookup: the worker fills `result`, then publishes `done`.
    final class Job: @unchecked Sendable {
        let id: Int
        let host: String
        let port: UInt16
        let lookup: Lookup
        let wake: EventFD
        /// Written by the worker before `done`; read by the loop after it.
        var result: Result<[SocketAddress], Resolver.Failure>? = nil
        let done = Atomic<Bool>(false)
        /// Loop side only: nil once the caller cancelled (the job is abandoned).
        var completion: Completion?

        init(id: Int, host: String, port: UInt16, lookup: @escaping Lookup, wake: EventFD, completion: @escaping Completion) {
            self.id = id
            self.host = host
            self.port = port
            self.lookup = lookup
            self.wake = wake
            self.completion = completion
        }

        /// On the worker thread.
        func run() {
            let r: Result<[SocketAddress], Resolver.Failure>
            do throws(Resolver.Failure) {
                r = .success(try lookup(host, port))
            } catch {
                r = .failure(error)
            }
            result = r
            done.store(true, ordering: .releasing)
            wake.signal()
        }
    }

    let loop: EventLoop
    /// How many lookups may block at once (threads alive).
    public let maxThreads: Int
    let wake: EventFD
    var source: EventLoop.SourceID?
    /// Jobs with a thread, abandoned ones included, until the thread is seen done.
    var running: [Job] = []
    /// Jobs waiting for a thread, in order.
    var waiting: [Job] = []
    var nextID = 1

    public init(loop: EventLoop, maxThreads: Int = 4) throws(SystemError) {
        self.loop = loop
        self.maxThreads = max(1, maxThreads)
        wake = try EventFD()
        // unowned(unsafe): the loop must not keep the resolver alive; deinit unwatches
        // before the resolver goes, so the handler never runs without it.
        source = loop.watch(fd: wake.fd) { [unowned(unsafe) self] _ in self.collect() }
    }

    deinit {
        if let source { loop.unwatch(source) }
    }

    /// Threads blocked in a lookup right now (answered or abandoned ones excluded once
    /// their thread has returned).
    public var threadsInUse: Int { running.count }

    /// Lookups waiting for a free thread.
    public var queued: Int { waiting.count }

    /// Starts looking `host` up with `lookup` on a thread; `completion` runs once, on
    /// the loop (never inside this call), unless the ticket is cancelled first.
    @discardableResult
    public func resolve(_ host: String, port: UInt16, using lookup: @escaping Lookup = { (h: String, p: UInt16) throws(Resolver.Failure) -> [SocketAddress] in try Resolver.resolve(h, port: p) },
                        completion: @escaping Completion) -> Ticket {
        let job = Job(id: nextID, host: host, port: port, lookup: lookup, wake: wake, completion: completion)
        nextID += 1
        waiting.append(job)
        startWaiting()
        return Ticket(raw: job.id)
    }

    /// The completion will not run. A lookup still waiting is dropped; one on a thread
    /// is abandoned (the thread finishes, or never does, on its own).
    public func cancel(_ ticket: Ticket) {
        if let i = waiting.firstIndex(where: { $0.id == ticket.raw }) {
            waiting.remove(at: i)
            return
        }
        for job in running where job.id == ticket.raw { job.completion = nil }
    }

    func startWaiting() {
        while running.count < maxThreads, !waiting.isEmpty {
            let job = waiting.removeFirst()
            do throws(SystemError) {
                try spawnDetached(job)
                running.append(job)
            } catch {
                // No thread (EAGAIN: out of threads or memory): the lookup fails now,
                // delivered on a later turn like any other result.
                job.result = .failure(.notFound(host: job.host, reason: "cannot start a resolver thread: \(SystemError.message(error.code))"))
                job.done.store(true, ordering: .releasing)
                running.append(job)
                wake.signal()
            }
        }
    }

    /// On the loop, when a worker signalled: delivers finished lookups, frees their
    /// slots, starts waiting ones.
    func collect() {
        wake.drain()
        var finished: [Job] = []
        running.removeAll { job in
            guard job.done.load(ordering: .acquiring) else { return false }
            finished.append(job)
            return true
        }
        startWaiting()
        for job in finished {
            guard let completion = job.completion, let result = job.result else { continue }
            job.completion = nil
            completion(result)
        }
    }

    func spawnDetached(_ job: Job) throws(SystemError) {
        let entry: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { context in
            let job = Unmanaged<Job>.fromOpaque(context!).takeRetainedValue()
            job.run()
            return nil
        }
        let context = Unmanaged.passRetained(job).toOpaque()
        var thread = pthread_t()
        let r = pthread_create(&thread, nil, entry, context)
        guard r == 0 else {
            Unmanaged<Job>.fromOpaque(context).release()
            throw SystemError("pthread_create", code: r)
        }
        // Nobody joins it: a thread stuck in getaddrinfo must not hold anyone up, and
        // its resources go back to the system when it returns (or the process exits).
        pthread_detach(thread)
    }
}
