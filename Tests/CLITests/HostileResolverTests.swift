import Testing
import Foundation
import Glibc
import CSystem
import Platform
import Signaling
import Audio
import Devices
import Wire
@testable import linnet
@testable import Runtime

// DNS off the loop.

@Suite struct ResolverOffTheLoopTests {
    /// A resolver that stops answering (the seam blocks until the test releases it):
    /// the loop's timers keep firing meanwhile, and the request ends at its deadline with
    /// a timeout that names the resolve phase. Before: `begin` blocked the loop inside
    /// getaddrinfo until the resolver gave up (here 5 s), no timer fired meanwhile, and
    /// the error was the resolver's, not the deadline's.
    @Test func aResolverThatNeverAnswersDoesNotStopTheLoopsTimers() throws {
        let loop = try EventLoop()
        let client = HTTPClient(loop: loop)
        let released = DispatchSemaphore(value: 0)
        let state = NSLock()
        var seamReturned = false
        client.resolve = { (host: String, _: UInt16) throws(Resolver.Failure) -> [SocketAddress] in
            _ = released.wait(timeout: .now() + 5)
            state.withLock { seamReturned = true }
            throw .notFound(host: host, reason: "the test resolver was released")
        }
        var result: Result<HTTPResponse, HTTPClientError>? = nil
        var ticksWhileResolving = 0
        func tick() {
            loop.schedule(after: .milliseconds(10)) {
                if !state.withLock({ seamReturned }) { ticksWhileResolving += 1 }
                if result == nil { tick() }
            }
        }
        tick()
        client.send(HTTPRequest(method: "DELETE", url: try HTTPURL("http://signal.example/whip/1")), timeout: .milliseconds(300)) { result = $0 }
        turnLoop(loop) { result != nil }
        released.signal()
        #expect(ticksWhileResolving >= 3, "timers fired while the lookup hung: \(ticksWhileResolving)")
        guard case .failure(let error) = result, case .timeout(_, _, let phase) = error else {
            Issue.record("expected a timeout, got \(String(describing: result))")
            return
        }
        #expect(phase == "resolving the host name")
        #expect(error.description.hasSuffix("(resolving the host name)"), "\(error)")
    }

    /// IP literals never reach the resolver (no thread for them).
    @Test func ipLiteralsSkipTheResolver() throws {
        let loop = try EventLoop()
        let client = HTTPClient(loop: loop)
        var asked = 0
        client.resolve = { (_: String, _: UInt16) throws(Resolver.Failure) -> [SocketAddress] in
            asked += 1
            return []
        }
        let dead = try TCPListener(bind: SocketAddress(ip: .loopbackV4, port: 0)).localAddress.port
        var result: Result<HTTPResponse, HTTPClientError>? = nil
        client.send(HTTPRequest(method: "GET", url: try HTTPURL("http://127.0.0.1:\(dead)/"))) { result = $0 }
        turnLoop(loop) { result != nil }
        guard case .failure(.connect) = result else {
            Issue.record("expected a refused connection, got \(String(describing: result))")
            return
        }
        #expect(asked == 0 && client.resolver == nil)
    }
}
