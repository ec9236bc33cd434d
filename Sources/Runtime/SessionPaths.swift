// One peer's network paths on the loop: a UDP socket per local address, its TURN
// allocations and its ICE-TCP connections. Both drivers of a `Peer` (Runtime for `run`,
// `demo` and `check`; Call for `answer`) move datagrams through here, so binding,
// reading, the choice of path for a transmit and the handling of a refused send are
// the same code for all of them. It decides nothing: which pair to use is ICE's.
import CSystem
import Wire
import Platform
import Peer

final class SessionPaths {
    let loop: EventLoop
    /// Whose paths, for the log ("session 3", "answer: session s1").
    let label: String
    private(set) var sockets: [UDPSocket]
    private var sources: [EventLoop.SourceID] = []
    /// TURN allocations: a transmit "from" a relayed address goes through its server.
    var relays: [RelayPath] = []
    /// ICE-TCP connections by remote passive candidate; nil: ICE-TCP is off.
    private var tcp: [SocketAddress: ICETCPPath] = [:]
    private let tcpLimit: Int?
    /// Shared by every session of a run: a reason is said once per run, not per session.
    /// A reference, not an inout: a relayed send can deliver a packet, and the driver's
    /// answer to it transmits again, before the first send returns.
    private let failures: SendFailures
    private var receiveBuffer = [UInt8](repeating: 0, count: 2048)
    /// errno values of failed reads already said.
    private var receiveSaid: [Int32] = []
    private(set) var closed = false

    /// A datagram or packet that arrived on `local` from `from`, in a scratch buffer
    /// valid during the call (SRTP is decrypted in place in it).
    var onPacket: (_ packet: UnsafeMutableRawBufferPointer, _ from: SocketAddress, _ local: SocketAddress) -> Void = { _, _, _ in }
    /// After a batch of packets: the driver drains its peer once, not per datagram.
    var afterInput: () -> Void = {}

    /// Binds a UDP socket on each address (port 0: the kernel picks). An address that
    /// cannot be bound is said and skipped; none at all is an error naming the last
    /// reason, so "is the network up?" comes with the kernel's own answer.
    init(loop: EventLoop, label: String, addresses: [IPAddress], tcpLimit: Int? = nil, failures: SendFailures) throws(SessionPathsError) {
        self.loop = loop
        self.label = label
        self.tcpLimit = tcpLimit
        self.failures = failures
        var bound: [UDPSocket] = []
        var last: SystemError? = nil
        for ip in addresses {
            do throws(SystemError) {
                bound.append(try UDPSocket(bind: SocketAddress(ip: ip, port: 0)))
            } catch {
                Log.warning("\(label): no candidates on \(ip): binding a UDP socket failed: \(error)")
                last = error
            }
        }
        guard !bound.isEmpty else { throw .noAddresses(last) }
        sockets = bound
        // Unowned: the sources are the paths' own, released by `close` or deinit.
        sources = bound.map { s in loop.watch(fd: s.fd) { [unowned(unsafe) self] _ in self.readable(s) } }
    }

    deinit { close() }

    var localAddresses: [SocketAddress] { sockets.map { $0.localAddress } }

    /// Sends one of `peer`'s datagrams on the path its `from` address names: a host
    /// socket, a relayed candidate's allocation (RFC 8445 §5.1.1.2: its base is itself),
    /// or an active TCP candidate (RFC 6544 §5.2: port 9). A send the kernel refuses is
    /// taken back out of the peer's counts and said once per reason (`SendFailures`).
    func transmit(_ bytes: [UInt8], from: SocketAddress, to: SocketAddress, for peer: Peer?) {
        guard !closed else { return }
        if let socket = sockets.first(where: { $0.localAddress == from }) {
            if let line = failures.send(bytes, on: socket, to: to, for: peer) { Log.warning("\(label): " + line) }
        } else if let relay = relays.first(where: { $0.relayedAddress == from }) {
            relay.send(bytes, to: to)
        } else if from.port == 9, let path = tcpPath(from: from, to: to) {
            path.send(bytes)
        }
    }

    /// The connection from active candidate `from` to the passive candidate `to`,
    /// opened on the first check. ICE takes at most `maximumTCPRemotes` of the peer's
    /// TCP candidates (the policy is there); `tcpLimit` holds to the same bound.
    private func tcpPath(from: SocketAddress, to: SocketAddress) -> ICETCPPath? {
        guard let tcpLimit else { return nil }
        if let p = tcp[to], !p.closed { return p }
        guard tcp.count < tcpLimit || tcp[to] != nil else { return nil }
        let path = ICETCPPath(loop: loop, remote: to, base: from)
        path.onPacket = { [unowned(unsafe) self] remote, local, packet in
            self.onPacket(packet, remote, local)
            self.afterInput()
        }
        let label = label
        path.onClosed = { why in Log.debug("\(label): ICE-TCP \(to): \(why)") }
        tcp[to] = path
        return path
    }

    private func readable(_ socket: UDPSocket) {
        // At most a budget of datagrams per turn (ReadBudget): the rest at the next.
        for _ in 0..<ReadBudget.datagrams where !closed {
            let got: (count: Int, from: SocketAddress)?
            do throws(SystemError) {
                got = try receiveBuffer.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in
                    try socket.receive(into: raw)
                }
            } catch {
                // Nothing is lost to an error here: Linux reports ICMP errors only to
                // connected UDP sockets (or with IP_RECVERR), so what is left (ENOMEM)
                // ends the turn and the next readable one tries again. Said once per reason.
                if !receiveSaid.contains(error.code) {
                    receiveSaid.append(error.code)
                    Log.debug("\(label): a read on \(socket.localAddress) failed (\(error)); said once")
                }
                break
            }
            guard let (n, from) = got else { break }
            let local = socket.localAddress
            receiveBuffer.withUnsafeMutableBytes { onPacket(UnsafeMutableRawBufferPointer(rebasing: $0[0..<n]), from, local) }
        }
        afterInput()
    }

    /// Lets go of every path: the sockets close, TCP connections drop, and allocations
    /// end with LIFETIME 0 (RFC 8656 §7.2) rather than linger 10 minutes.
    func close() {
        guard !closed else { return }
        closed = true
        for s in sources { loop.unwatch(s) }
        sources = []
        for (_, path) in tcp { path.close() }
        tcp = [:]
        for path in relays { path.release() }
        relays = []
        sockets = []
        onPacket = { _, _, _ in }
        afterInput = {}
    }
}

public enum SessionPathsError: Error, CustomStringConvertible {
    /// No local address could be bound; the last reason, when there was an address.
    case noAddresses(SystemError?)

    public var description: String {
        switch self {
        case .noAddresses(nil): return "no usable network address to gather candidates on (is the network up?)"
        case .noAddresses(let e?): return "no usable network address to gather candidates on: \(e)"
        }
    }
}
