import Testing
import Glibc
import Wire
import Platform
@testable import Runtime

/// The paths both drivers of a Peer use, on real loopback sockets and the real loop.
@Suite struct SessionPathsTests {
    /// An address this host does not have is said and skipped (EADDRNOTAVAIL from the
    /// kernel, RFC 5737's documentation range), and the others still serve; datagrams
    /// arrive with their source and the local address they came to, as a batch.
    @Test func anUnbindableAddressIsSkippedAndTheRestServe() throws {
        let loop = try EventLoop()
        let paths = try SessionPaths(loop: loop, label: "test", addresses: [IPAddress("192.0.2.1")!, IPAddress("127.0.0.1")!],
                                     failures: SendFailures())
        #expect(paths.localAddresses.count == 1)
        let local = paths.localAddresses[0]
        #expect(local.ip == IPAddress("127.0.0.1")! && local.port != 0)

        var got: [([UInt8], SocketAddress, SocketAddress)] = []
        var batches = 0
        paths.onPacket = { packet, from, to in got.append((Array(packet), from, to)) }
        paths.afterInput = { batches += 1 }
        let other = try UDPSocket(bind: SocketAddress("127.0.0.1:0")!)
        #expect(try other.send([1, 2, 3], to: local))
        #expect(try other.send([4, 5], to: local))
        while got.count < 2 { try loop.runOnce() }
        #expect(got.map { $0.0 } == [[1, 2, 3], [4, 5]])
        #expect(got.allSatisfy { $0.1 == other.localAddress && $0.2 == local })
        #expect(batches >= 1 && batches <= 2)

        // A transmit from the bound address leaves on its socket; one from an address
        // that is no path of these (a stale pair) goes nowhere.
        paths.transmit([9, 9], from: local, to: other.localAddress, for: nil)
        paths.transmit([7], from: SocketAddress("127.0.0.1:1")!, to: other.localAddress, for: nil)
        var buffer = [UInt8](repeating: 0, count: 16)
        var received: [[UInt8]] = []
        loop.watch(fd: other.fd) { _ in
            while let (n, _) = (try? buffer.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try other.receive(into: raw) }) ?? nil {
                received.append(Array(buffer[0..<n]))
            }
        }
        while received.isEmpty { try loop.runOnce() }
        _ = try? loop.runOnce(maxWait: .milliseconds(0))
        #expect(received == [[9, 9]])

        // Closed: nothing more is delivered or sent.
        paths.close()
        #expect(paths.closed && paths.localAddresses.isEmpty)
        paths.transmit([1], from: local, to: other.localAddress, for: nil)
    }

    /// No address at all: the error carries the kernel's reason, not only a guess.
    @Test func noAddressSaysWhy() throws {
        let loop = try EventLoop()
        do {
            _ = try SessionPaths(loop: loop, label: "test", addresses: [IPAddress("192.0.2.1")!], failures: SendFailures())
            Issue.record("bound an address this host does not have")
        } catch {
            #expect(error.description.contains("no usable network address"), "\(error)")
            #expect(error.description.contains("errno \(EADDRNOTAVAIL)"), "\(error)")
        }
        do {
            _ = try SessionPaths(loop: loop, label: "test", addresses: [], failures: SendFailures())
            Issue.record("bound with no address")
        } catch {
            #expect(error.description == "no usable network address to gather candidates on (is the network up?)")
        }
    }
}
