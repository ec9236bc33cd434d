// ICE-TCP's side of the loop (RFC 6544): one outgoing TCP connection per remote passive
// candidate a session checks, carrying STUN, DTLS and SRTP framed as RFC 4571 says.
// The ICE agent names the path by value: a transmit "from" an active TCP candidate's
// base (host IP, port 9) to a remote address is written to the connection to that
// address, opened on first use; what arrives on it is handed back with that base as
// the local address.
import CSystem
import Wire
import Platform
import ICE

final class ICETCPPath {
    let loop: EventLoop
    let remote: SocketAddress
    let base: SocketAddress
    var socket: TCPSocket?
    var source: EventLoop.SourceID?
    var connecting = true
    var closed = false
    var framer = RFC4571Framer()
    var outgoing: [UInt8] = []
    var receiveBuffer = [UInt8](repeating: 0, count: 16_384)
    /// A whole packet from the peer, in a scratch buffer valid during the call.
    var onPacket: (_ from: SocketAddress, _ local: SocketAddress, _ packet: UnsafeMutableRawBufferPointer) -> Void = { _, _, _ in }
    var onClosed: (String) -> Void = { _ in }

    /// What may wait unsent: a peer that stops reading costs at most this, then the
    /// connection is dropped (consent then notices, RFC 7675).
    static let maxBacklog = 256 * 1024

    init(loop: EventLoop, remote: SocketAddress, base: SocketAddress) {
        self.loop = loop
        self.remote = remote
        self.base = base
        do throws(SystemError) {
            let s = try TCPSocket.connect(to: remote)
            socket = s
            source = loop.watch(fd: s.fd, events: Int16(POLLOUT)) { [self] revents in self.ready(revents) }
        } catch {
            closed = true
            connecting = false
        }
    }

    deinit { close() }

    /// Frames and queues one packet (a check, a DTLS record, an SRTP packet).
    func send(_ packet: [UInt8]) {
        guard !closed, let framed = RFC4571Framer.frame(packet) else { return }
        guard outgoing.count + framed.count <= Self.maxBacklog else { return fail("the peer stopped reading (\(Self.maxBacklog / 1024) KiB waiting)") }
        outgoing += framed
        if !connecting { flush() }
    }

    private func ready(_ revents: Int16) {
        guard let socket, !closed else { return }
        if connecting {
            do throws(SystemError) { try socket.finishConnect() } catch { return fail(error.description) }
            connecting = false
        }
        if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 { receive() }
        flush()
    }

    private func receive() {
        // At most a budget of bytes per turn (ReadBudget, readStreamTurn): a peer that
        // keeps the socket full (tiny or empty RFC 4571 frames without end) is read at
        // the next turn.
        guard let socket else { return }
        let end = readStreamTurn(budget: ReadBudget.streamBytes, read: { () -> StreamRead in
            do throws(SystemError) {
                let got = try receiveBuffer.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try socket.receive(into: raw) }
                guard let n = got else { return .wouldBlock }
                return n == 0 ? .closed : .bytes(n)
            } catch {
                return .failed(error.description)
            }
        }, consume: { n in
            for var packet in framer.feed(Array(receiveBuffer[0..<n])) where !closed {
                packet.withUnsafeMutableBytes { onPacket(remote, base, $0) }
            }
            return !closed
        })
        switch end {
        case .closed: fail("the peer closed the connection")
        case .failed(let why): fail(why)
        case .drained, .budgetSpent, .stopped: break
        }
    }

    private func flush() {
        guard let socket, !closed, !connecting else { return }
        if !outgoing.isEmpty {
            do throws(SystemError) {
                let n = try outgoing.withBytes { (raw: UnsafeRawBufferPointer) throws(SystemError) in try socket.send(raw) }
                outgoing.removeFirst(n)
            } catch {
                return fail(error.description)
            }
        }
        if let source { loop.update(source, events: Int16(POLLIN) | (outgoing.isEmpty ? 0 : Int16(POLLOUT))) }
    }

    private func fail(_ why: String) {
        guard !closed else { return }
        close()
        onClosed(why)
    }

    func close() {
        guard !closed || socket != nil else { return }
        closed = true
        if let source { loop.unwatch(source) }
        source = nil
        socket = nil
        outgoing = []
    }
}
