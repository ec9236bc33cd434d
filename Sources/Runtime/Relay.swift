// One TURN allocation on the loop (RFC 8656): the path to the server (a UDP socket, a
// TCP connection, or TLS over TCP), the sans-IO TURNClient, and its timer. The session
// sees only a relayed address: what ICE sends "from" it comes here, and what the relay
// delivers goes back to the session as if it arrived on a socket bound to it.
import CSystem
import Wire
import Platform
import ICE
import Signaling
import DTLS

/// How a relay reaches TLS: the trust store and DRBG of the run's HTTP client (one CA
/// bundle parse), and the wall clock certificates are checked against.
struct RelayTLS {
    var trust: () throws(HTTPClientError) -> TLSTrustStore
    var random: () throws(HTTPClientError) -> TLSRandom
    var realtime: () -> Int64

    init(http: HTTPClient) {
        trust = { () throws(HTTPClientError) in try http.trustStore() }
        random = { () throws(HTTPClientError) in try http.tlsRandom() }
        realtime = { http.realtime() }
    }
}

final class RelayPath {
    let loop: EventLoop
    let server: TURNServer
    let serverAddress: SocketAddress
    var client: TURNClient<SeededRandom>
    let tlsSetup: RelayTLS?
    var udp: UDPSocket?
    var tcp: TCPSocket?
    var tls: TLSClient?
    var framer = TURNStreamFramer()
    var outgoing: [UInt8] = []
    var source: EventLoop.SourceID?
    var timer: DeadlineTimer!
    var connecting = false
    var closed = false
    let startedAt: Instant
    /// When the allocation was made (figures for the log and `check`).
    private(set) var allocatedAfter: Duration?
    var receiveBuffer = [UInt8](repeating: 0, count: 65_536 + 8)
    let sendFailures = SendFailures()

    var onAllocated: (_ path: RelayPath, _ relayed: SocketAddress, _ mapped: SocketAddress?) -> Void = { _, _, _ in }
    var onFailed: (TURNFailure) -> Void = { _ in }
    /// A packet from `peer` through the relay, in a scratch buffer valid during the call.
    var onData: (_ relayed: SocketAddress, _ peer: SocketAddress, _ packet: UnsafeMutableRawBufferPointer) -> Void = { _, _, _ in }

    var relayedAddress: SocketAddress? { client.relayedAddress }

    /// Starts at once: over UDP the Allocate goes out now, over TCP and TLS after the
    /// connection (and handshake). Failures are reported through `onFailed`, later.
    init(loop: EventLoop, server: TURNServer, address: SocketAddress, tls: RelayTLS?, seed: UInt64) {
        self.loop = loop
        self.server = server
        serverAddress = address
        tlsSetup = tls
        startedAt = loop.now
        client = TURNClient(server: server, rng: SeededRandom(seed: seed))
        // Unowned: the timer is the path's own (a strong capture is a cycle).
        timer = DeadlineTimer(loop: loop) { [unowned(unsafe) self] in
            // Before the allocation starts the only deadline is the connection's (TCP
            // connect and TLS handshake, within the stream timeout).
            if self.client.state == .idle { return self.lost("no connection within \(self.client.timing.streamTimeout.milliseconds / 1000) s") }
            self.client.handleTimeout(now: self.loop.now)
            self.pump()
        }
    }

    deinit { shutdown() }

    func start() {
        loop.schedule(after: .zero) { [self] in self.begin() }
    }

    private func begin() {
        guard !closed else { return }
        switch server.transport {
        case .udp:
            let any = serverAddress.ip.isV4 ? IPAddress("0.0.0.0") : IPAddress("::")
            guard let any, let s = try? UDPSocket(bind: SocketAddress(ip: any, port: 0)) else {
                return lost("cannot open a UDP socket")
            }
            udp = s
            source = loop.watch(fd: s.fd) { [self] _ in self.readableUDP() }
            client.allocate(now: loop.now)
            pump()
        case .tcp, .tls:
            do throws(SystemError) {
                tcp = try TCPSocket.connect(to: serverAddress)
            } catch {
                return lost(error.description)
            }
            connecting = true
            source = loop.watch(fd: tcp!.fd, events: Int16(POLLOUT)) { [self] revents in self.readyStream(revents) }
            // The connect is bounded by the client's stream timeout as well.
            timer.arm(loop.now + client.timing.streamTimeout)
        }
    }

    // MARK: Sending

    /// Relays `bytes` to `peer` (ICE checks and media from the relayed candidate).
    func send(_ bytes: [UInt8], to peer: SocketAddress) {
        guard !closed else { return }
        client.send(bytes, to: peer, now: loop.now)
        pump()
    }

    /// Refresh now: after an ICE restart, proof that the relay still lives.
    func refresh() {
        client.refresh(now: loop.now)
        pump()
    }

    /// LIFETIME 0 (RFC 8656 §7.2), one best-effort write, then the path closes.
    func release() {
        guard !closed else { return }
        client.release(now: loop.now)
        pump()
        shutdown()
    }

    /// Drains the client: bytes to the server, events to the owner, the next deadline.
    func pump() {
        while !closed {
            switch client.pollOutput() {
            case .send(let bytes):
                write(bytes)
            case .event(let e):
                switch e {
                case .allocated(let relayed, let mapped):
                    allocatedAfter = loop.now - startedAt
                    onAllocated(self, relayed, mapped)
                case .refreshed:
                    break
                case .failed(let f):
                    onFailed(f)
                    shutdown()
                    return
                case .data(let from, var bytes):
                    guard let relayed = client.relayedAddress else { continue }
                    bytes.withUnsafeMutableBytes { onData(relayed, from, $0) }
                }
            case .timeout(let t):
                if client.state != .idle { timer.arm(t) }
                return
            }
        }
    }

    private func write(_ bytes: [UInt8]) {
        if let udp {
            // Lost datagrams are what retransmissions (and consent) are for; a socket
            // that refuses them is said once per reason.
            var refused: SystemError? = nil
            var sent = false
            do throws(SystemError) { sent = try udp.send(bytes, to: serverAddress) } catch { refused = error }
            if !sent, let line = sendFailures.note(refused, to: serverAddress) { Log.warning("the relay \(server.url): " + line) }
            return
        }
        if let tls {
            do throws(TLSError) { try tls.send(bytes) } catch { return lost(error) }
            pumpTLS()
            return
        }
        outgoing += bytes
        flush()
    }

    // MARK: UDP

    private func readableUDP() {
        guard let udp else { return }
        for _ in 0..<ReadBudget.datagrams where !closed {
            // As in Runtime.readable: an error leaves no datagram behind, it ends the turn.
            let got = try? receiveBuffer.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try udp.receive(into: raw) }
            guard let (n, from) = got ?? nil else { return }
            // Only the server speaks on this socket: anything else is a stranger.
            guard from == serverAddress else { continue }
            client.handleMessage(Array(receiveBuffer[0..<n]), now: loop.now)
            pump()
        }
    }

    // MARK: TCP and TLS

    private func readyStream(_ revents: Int16) {
        guard let tcp, !closed else { return }
        if connecting {
            do throws(SystemError) { try tcp.finishConnect() } catch { return lost(error.description) }
            connecting = false
            if server.transport == .tls {
                guard startTLS() else { return }
            } else {
                client.allocate(now: loop.now)
                pump()
            }
        }
        if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 { receiveStream() }
        flush()
        updateInterest()
    }

    private func startTLS() -> Bool {
        guard let setup = tlsSetup else { lost("TLS is not available"); return false }
        do throws(HTTPClientError) {
            let configuration = TLSClientConfiguration(hostname: server.url.host, trust: try setup.trust(),
                                                       validationTime: setup.realtime(), handshakeTimeout: client.timing.streamTimeout)
            let random = try setup.random()
            do throws(TLSError) {
                tls = try TLSClient(configuration: configuration, random: random)
            } catch {
                lost(error)
                return false
            }
        } catch {
            // The trust store or the CA file: a person's to fix, as for HTTPS.
            lost(error.description, configuration: error.isConfigurationProblem)
            return false
        }
        tls?.start(now: loop.now)
        pumpTLS()
        return !closed
    }

    private func pumpTLS() {
        while let tls, !closed {
            switch tls.pollOutput() {
            case .transmit(let bytes):
                outgoing += bytes
            case .event(.connected):
                client.allocate(now: loop.now)
                pump()
            case .event(.data(let bytes)):
                deliverStream(bytes)
            case .event(.closed):
                return lost("the server closed the TLS connection")
            case .event(.failed(let error)):
                return lost(error)
            case .timeout:
                flush()
                return
            }
        }
    }

    private func receiveStream() {
        // At most a budget of bytes per turn (ReadBudget, readStreamTurn): a server that
        // keeps the socket full (empty ChannelData without end) is read at the next
        // turn, after the audio, the timers and the signals.
        guard let tcp else { return }
        let end = readStreamTurn(budget: ReadBudget.streamBytes, read: { () -> StreamRead in
            do throws(SystemError) {
                let got = try receiveBuffer.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try tcp.receive(into: raw) }
                guard let n = got else { return .wouldBlock }
                return n == 0 ? .closed : .bytes(n)
            } catch {
                return .failed(error.description)
            }
        }, consume: { n in
            if let tls {
                tls.handleInput(Array(receiveBuffer[0..<n]), now: loop.now)
                pumpTLS()
            } else {
                deliverStream(Array(receiveBuffer[0..<n]))
            }
            return !closed
        })
        switch end {
        case .closed:
            if let tls { tls.handleEndOfStream(now: loop.now); pumpTLS() }
            lost("the server closed the connection")
        case .failed(let why): lost(why)
        case .drained, .budgetSpent, .stopped: break
        }
    }

    /// Stream bytes → whole TURN messages (RFC 8656 §12.5); anything that is not TURN
    /// leaves no way to find the next boundary, so the connection ends.
    private func deliverStream(_ bytes: [UInt8]) {
        let messages: [[UInt8]]
        do throws(ICEError) { messages = try framer.feed(bytes) } catch { return lost("the server sent something that is not TURN (\(error))") }
        for m in messages where !closed {
            client.handleMessage(m, now: loop.now)
            pump()
        }
    }

    private func flush() {
        guard let tcp, !outgoing.isEmpty, !connecting else { return }
        do throws(SystemError) {
            let n = try outgoing.withBytes { (raw: UnsafeRawBufferPointer) throws(SystemError) in try tcp.send(raw) }
            outgoing.removeFirst(n)
            // A server that stops reading: a bounded backlog, then the path is given up.
            if outgoing.count > 1 << 20 { return lost("the server stopped reading (1 MiB waiting)") }
        } catch {
            return lost(error.description)
        }
        updateInterest()
    }

    private func updateInterest() {
        guard let source, !closed, !connecting else { return }
        loop.update(source, events: Int16(POLLIN) | (outgoing.isEmpty ? 0 : Int16(POLLOUT)))
    }

    /// The path to the server failed: the client reports it (once) and all closes.
    func lost(_ why: String, configuration: Bool = false) {
        guard !closed else { return }
        connecting = false
        client.connectionLost(why)
        pump()
        if !closed {
            onFailed(configuration ? .certificate(why) : .connection(why))
            shutdown()
        }
    }

    /// A TLS failure: a certificate that does not verify is a person's to fix.
    func lost(_ error: TLSError) {
        switch error {
        case .certificateRejected, .noTrustAnchors, .badTrustStore: lost(error.description, configuration: true)
        default: lost(error.description)
        }
    }

    func shutdown() {
        guard !closed else { return }
        closed = true
        if let source { loop.unwatch(source) }
        source = nil
        timer?.cancel()
        // What was queued (the LIFETIME 0 refresh) gets one non-blocking write.
        if let tls, tls.state == .connected {
            tls.close()
            while case .transmit(let b) = tls.pollOutput() { outgoing += b }
        }
        if let tcp, !outgoing.isEmpty {
            // Best effort by design: the server also ends an allocation that is not
            // refreshed (RFC 8656 §7), so a lost release costs it only the lifetime.
            _ = try? outgoing.withBytes { (raw: UnsafeRawBufferPointer) throws(SystemError) in try tcp.send(raw) }
        }
        outgoing = []
        udp = nil
        tcp = nil
        tls = nil
    }
}

/// `linnet check`: one allocation on a TURN server, then its release.
public enum RelayProbe {
    public struct Allocated {
        public var relayed: SocketAddress
        public var mapped: SocketAddress?
        public var after: Duration
    }

    /// Allocates on `server` (at `address`) on `loop`, waiting at most `timeout`; the
    /// allocation is released (LIFETIME 0) before returning. TLS trusts the system
    /// bundle plus `http`'s CA file.
    public static func allocate(loop: EventLoop, server: TURNServer, address: SocketAddress, http: HTTPClient,
                                timeout: Duration = .seconds(10)) -> Result<Allocated, TURNFailure> {
        let tls = RelayTLS(http: http)
        var seed: UInt64 = 0
        // Without the DRBG the check still allocates, with predictable transaction IDs
        // (RFC 8489 §5 wants them random against off-path forgery): said, not fatal.
        var noSeed: String? = nil
        do throws(TLSError) {
            let random = try TLSRandom.tls()
            do throws(DTLSError) { for b in try random.bytes(8) { seed = seed << 8 | UInt64(b) } } catch { noSeed = error.description }
        } catch {
            noSeed = error.description
        }
        if let noSeed { Log.warning("no random seed for the TURN transaction IDs (\(noSeed)); checking with fixed ones") }
        let path = RelayPath(loop: loop, server: server, address: address, tls: tls, seed: seed)
        var result: Result<Allocated, TURNFailure>? = nil
        path.onAllocated = { p, relayed, mapped in
            result = .success(Allocated(relayed: relayed, mapped: mapped, after: p.allocatedAfter ?? .zero))
        }
        path.onFailed = { f in if result == nil { result = .failure(f) } }
        path.start()
        let deadline = loop.now + timeout
        while result == nil, loop.now < deadline {
            do throws(SystemError) { try loop.runOnce(maxWait: deadline - loop.now) } catch { break }
        }
        path.release()
        return result ?? .failure(.timeout)
    }
}
