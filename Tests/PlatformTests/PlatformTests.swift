import Testing
import Foundation
import CSystem
import Wire
@testable import Platform

@Suite struct SyscallFunnelTests {
    @Test func errnoBecomesATypedError() {
        #expect(throws: SystemError("open", code: ENOENT)) {
            try sys("open") { csystem_open("/nonexistent/linnet", O_RDONLY, 0) }
        }
        let e = SystemError("bind", code: EADDRINUSE)
        #expect(e.description == "bind: Address already in use (errno \(EADDRINUSE))")
    }

    @Test func wouldBlockIsAValueNotAnError() throws {
        let event = try EventFD()
        var value: UInt64 = 0
        let r = try sysNonBlocking("read") { read(event.fd, &value, 8) }
        guard case .wouldBlock = r else {
            Issue.record("an empty non-blocking eventfd read should report would-block")
            return
        }
    }
}

@Suite struct EventLoopTests {
    /// Timers whose deadlines have passed fire on the next turn, in deadline order, not in
    /// the order they were scheduled; a cancelled one never fires.
    @Test func dueTimersFireInDeadlineOrder() throws {
        let loop = try EventLoop()
        let base = loop.now - .seconds(1)
        var fired: [Int] = []
        loop.schedule(at: base + .milliseconds(3)) { fired.append(3) }
        loop.schedule(at: base + .milliseconds(1)) { fired.append(1) }
        let cancelled = loop.schedule(at: base + .milliseconds(2)) { fired.append(2) }
        loop.schedule(at: base) { fired.append(0) }
        loop.cancel(cancelled)
        try loop.runOnce()
        #expect(fired == [0, 1, 3])
        #expect(loop.pendingTimers == 0)
    }

    /// The timerfd wakes poll for a future deadline: the loop waits in poll (no sleep) and
    /// the timer fires no earlier than asked.
    @Test func futureTimerWakesThePoll() throws {
        let loop = try EventLoop()
        let deadline = loop.now + .milliseconds(5)
        var firedAt: Instant? = nil
        loop.schedule(at: deadline) { firedAt = loop.now }
        while firedAt == nil { try loop.runOnce() }
        #expect(firedAt! >= deadline)
    }

    /// A timer scheduled from inside a timer handler is kept for a later turn.
    @Test func timerScheduledFromAHandler() throws {
        let loop = try EventLoop()
        var order: [String] = []
        loop.schedule(at: loop.now - .milliseconds(1)) {
            order.append("first")
            loop.schedule(at: loop.now - .milliseconds(1)) { order.append("second") }
        }
        try loop.runOnce()
        #expect(order == ["first"])
        try loop.runOnce()
        #expect(order == ["first", "second"])
    }

    /// A descriptor becoming readable calls its handler; after unwatch it no longer does.
    @Test func watchedDescriptorDispatch() throws {
        let loop = try EventLoop()
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        var calls = 0
        let source = loop.watch(fd: fds[0]) { revents in
            #expect(revents & Int16(POLLIN) != 0)
            var byte: UInt8 = 0
            _ = read(fds[0], &byte, 1)
            calls += 1
        }
        var one: UInt8 = 1
        _ = write(fds[1], &one, 1)
        try loop.runOnce()
        #expect(calls == 1)
        loop.unwatch(source)
        _ = write(fds[1], &one, 1)
        try loop.runOnce(maxWait: .zero)
        #expect(calls == 1)
    }

    /// Another thread wakes a loop blocked in poll with no timers; the eventfd counts
    /// signals until drained.
    @Test func wakeFromAnotherThread() throws {
        let loop = try EventLoop()
        let event = try EventFD()
        var drained: UInt64 = 0
        loop.watch(fd: event.fd) { _ in drained += event.drain() }
        let thread = Thread { event.signal(); event.signal() }
        thread.start()
        while drained < 2 { try loop.runOnce() }
        #expect(drained == 2)
        #expect(loop.turns >= 1)
    }

    @Test func stopEndsRun() throws {
        let loop = try EventLoop()
        var ticks = 0
        func tick() {
            ticks += 1
            if ticks == 3 { loop.stop() } else { loop.schedule(at: loop.now) { tick() } }
        }
        loop.schedule(at: loop.now) { tick() }
        try loop.run()
        #expect(ticks == 3)
    }
}

@Suite struct UDPSocketTests {
    @Test func loopbackExchange() throws {
        let a = try UDPSocket(bind: SocketAddress("127.0.0.1:0")!)
        let b = try UDPSocket(bind: SocketAddress("127.0.0.1:0")!)
        #expect(a.localAddress.port != 0)
        var buffer = [UInt8](repeating: 0, count: 64)
        let nothing = try buffer.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try b.receive(into: raw) }
        #expect(nothing == nil)
        #expect(try a.send([1, 2, 3], to: b.localAddress))
        let loop = try EventLoop()
        var got: (Int, SocketAddress)? = nil
        loop.watch(fd: b.fd) { _ in
            got = try? buffer.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try b.receive(into: raw) }
        }
        while got == nil { try loop.runOnce() }
        #expect(got!.0 == 3)
        #expect(got!.1 == a.localAddress)
        #expect(Array(buffer[0..<3]) == [1, 2, 3])
    }

    @Test func ipv6Loopback() throws {
        guard let a = try? UDPSocket(bind: SocketAddress("[::1]:0")!) else { return }  // no IPv6 here
        let b = try UDPSocket(bind: SocketAddress("[::1]:0")!)
        #expect(try a.send([9], to: b.localAddress))
        var buffer = [UInt8](repeating: 0, count: 8)
        let loop = try EventLoop()
        var from: SocketAddress? = nil
        loop.watch(fd: b.fd) { _ in
            from = (try? buffer.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try b.receive(into: raw) })??.from
        }
        while from == nil { try loop.runOnce() }
        #expect(from == a.localAddress)
        #expect(from?.description.hasPrefix("[::1]:") == true)
    }

    @Test func bindErrorsAreClear() throws {
        let a = try UDPSocket(bind: SocketAddress("127.0.0.1:0")!)
        #expect(throws: SystemError("bind \(a.localAddress)", code: EADDRINUSE)) {
            _ = try UDPSocket(bind: a.localAddress)
        }
    }
}

@Suite struct NotifyTests {
    /// A datagram socket standing in for systemd's notification socket.
    final class FakeSystemd {
        let fd: Int32
        let name: String
        init(abstract: Bool) {
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
            let unique = "linnet-test-\(getpid())-\(UInt32.random(in: 0 ... .max))"
            name = abstract ? "@" + unique : NSTemporaryDirectory() + unique
            var addr = sockaddr_un()
            addr.sun_family = sa_family_t(AF_UNIX)
            var bytes = Array(name.utf8)
            if abstract { bytes[0] = 0 }
            withUnsafeMutableBytes(of: &addr.sun_path) { dst in for (i, b) in bytes.enumerated() { dst[i] = b } }
            let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1))
            let r = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
            precondition(r == 0, "bind failed")
        }
        deinit {
            close(fd)
            if !name.hasPrefix("@") { unlink(name) }
        }
        func receive() -> String {
            var buffer = [UInt8](repeating: 0, count: 512)
            let n = recv(fd, &buffer, buffer.count, 0)
            return String(decoding: buffer[0..<max(0, n)], as: UTF8.self)
        }
    }

    @Test(arguments: [false, true])
    func sendsStateToTheSocket(abstract: Bool) {
        let systemd = FakeSystemd(abstract: abstract)
        let notifier = SystemdNotifier(socketPath: systemd.name, watchdogUSec: nil, watchdogPID: nil)
        #expect(notifier != nil)
        #expect(notifier?.ready() == true)
        #expect(systemd.receive() == "READY=1")
        #expect(notifier?.status("connected") == true)
        #expect(systemd.receive() == "STATUS=connected")
        #expect(notifier?.watchdog() == true)
        #expect(systemd.receive() == "WATCHDOG=1")
    }

    @Test func watchdogInterval() {
        let mine = String(getpid())
        #expect(SystemdNotifier(socketPath: "/run/x", watchdogUSec: "20000000", watchdogPID: mine)?.watchdogInterval == .seconds(20))
        #expect(SystemdNotifier(socketPath: "/run/x", watchdogUSec: "20000000", watchdogPID: nil)?.watchdogInterval == .seconds(20))
        #expect(SystemdNotifier(socketPath: "/run/x", watchdogUSec: "20000000", watchdogPID: "1")?.watchdogInterval == nil)
        #expect(SystemdNotifier(socketPath: "/run/x", watchdogUSec: "junk", watchdogPID: nil)?.watchdogInterval == nil)
    }

    @Test func noSocketMeansNoNotifier() {
        #expect(SystemdNotifier(socketPath: nil, watchdogUSec: nil, watchdogPID: nil) == nil)
        #expect(SystemdNotifier(socketPath: "", watchdogUSec: nil, watchdogPID: nil) == nil)
        #expect(SystemdNotifier(socketPath: "relative/path", watchdogUSec: nil, watchdogPID: nil) == nil)
    }
}

@Suite struct LogTests {
    @Test func journalPrefixesAndPlainForm() {
        let saved = Log.journal
        defer { Log.journal = saved }
        Log.journal = true
        #expect(Log.format(.error, "boom") == "<3>boom")
        #expect(Log.format(.warning, "hmm") == "<4>hmm")
        #expect(Log.format(.info, "ok") == "<6>ok")
        #expect(Log.format(.debug, "x") == "<7>x")
        Log.journal = false
        #expect(Log.format(.error, "boom") == "linnet: error: boom")
        #expect(Log.format(.info, "ok") == "linnet: ok")
    }

    @Test func levelNames() {
        #expect(LogLevel(name: "warn") == .warning)
        #expect(LogLevel(name: "debug") == .debug)
        #expect(LogLevel(name: "loud") == nil)
        #expect(LogLevel.error < LogLevel.debug)
    }
}

@Suite struct RandomSourceTests {
    @Test func systemRandomFillsBuffers() throws {
        var a = [UInt8](repeating: 0, count: 32), b = [UInt8](repeating: 0, count: 32)
        try a.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try secureRandomBytes(raw) }
        try b.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try secureRandomBytes(raw) }
        // 256 random bits twice: equal or all-zero only with probability 2^-256.
        #expect(a != b)
        #expect(a.contains { $0 != 0 })
    }
}

@Suite struct LogFilterTests {
    /// At the default level, errors and warnings are written and debug lines are not.
    @Test func levelFilter() {
        #expect(LogLevel.error <= LogLevel.info)
        #expect(LogLevel.warning <= LogLevel.info)
        #expect(!(LogLevel.debug <= LogLevel.info))
    }
}

/// `EventLoop.close()` lets go of every handler, and what a handler held may unwatch or
/// cancel from its deinit as it goes (an exclusivity trap before: the loop's array was
/// being emptied while the deinit changed it).
@Suite struct EventLoopCloseTests {
    final class Owner {
        let loop: EventLoop
        var source: EventLoop.SourceID?
        var timer: EventLoop.TimerID?
        let freed: UnsafeMutablePointer<Int>
        init(loop: EventLoop, fd: Int32, freed: UnsafeMutablePointer<Int>) {
            self.loop = loop
            self.freed = freed
            // The handlers hold the owner, which holds the loop: a cycle close() breaks.
            source = loop.watch(fd: fd) { _ in _ = self }
            timer = loop.schedule(after: .seconds(3600)) { _ = self }
        }
        deinit {
            if let source { loop.unwatch(source) }
            if let timer { loop.cancel(timer) }
            freed.pointee += 1
        }
    }

    @Test func closeReleasesHandlersWhoseCapturesUnwatchInTheirDeinit() throws {
        let loop = try EventLoop()
        let fd = try EventFD()
        let freed = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        freed.initialize(to: 0)
        defer { freed.deallocate() }
        for _ in 0..<3 { _ = Owner(loop: loop, fd: fd.fd, freed: freed) }
        #expect(freed.pointee == 0, "held by the loop's handlers")
        #expect(loop.pendingTimers == 3)
        loop.close()
        #expect(freed.pointee == 3)
        #expect(loop.pendingTimers == 0)
    }
}
