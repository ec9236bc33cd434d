// One HTTP(S) request in flight (`HTTPCall`): resolve, connect address after address,
// TLS, write the request, read the response, within one deadline. It executes
// Signaling's sans-IO HTTP codec and TLS client against a socket and the loop's timers,
// so it stays in the I/O layer: its phases are driven by syscalls and timers, not by a
// pure state machine. The design is described in HTTPClient.swift.
import CSystem
import Wire
import Platform
import Signaling

/// One request in flight: resolve, connect (address after address), TLS, write the
/// request, read the response. The handle `HTTPClient.send` returns.
public final class HTTPCall {
    enum Phase: Equatable {
        case waiting, resolving, connecting, handshaking, exchanging, done

        var words: String {
            switch self {
            case .waiting: return "not started"
            case .resolving: return "resolving the host name"
            case .connecting: return "connecting"
            case .handshaking: return "in the TLS handshake"
            case .exchanging: return "waiting for the response"
            case .done: return "done"
            }
        }
    }

    let client: HTTPClient
    let loop: EventLoop
    let request: HTTPRequest
    let timeout: Duration
    var completion: ((Result<HTTPResponse, HTTPClientError>) -> Void)?
    private(set) var phase = Phase.waiting
    var deadline = Instant.zero
    var startedAt = Instant.zero

    var addresses: [SocketAddress] = []
    var nextAddress = 0
    var connectErrors: [SystemError] = []
    /// The name lookup in progress (on a resolver thread).
    var lookup: BackgroundResolver.Ticket?
    var socket: TCPSocket?
    var source: EventLoop.SourceID?
    /// The whole exchange's deadline; also the zero-delay start and error delivery.
    var timer: EventLoop.TimerID?
    /// The current connect attempt's share of the time.
    var attemptTimer: EventLoop.TimerID?
    var tls: TLSClient?
    var outgoing: [UInt8] = []
    var parser: HTTPResponseParser
    var receiveBuffer: [UInt8] = []

    /// Time from start to TCP connected, and TLS handshake time (figures for logs).
    private(set) var connectTime: Duration?
    private(set) var handshakeTime: Duration?

    init(client: HTTPClient, request: HTTPRequest, timeout: Duration,
         completion: @escaping (Result<HTTPResponse, HTTPClientError>) -> Void) {
        self.client = client
        loop = client.loop
        var request = request
        // One request per connection: say so, so the server does not keep it open.
        if request.headers["Connection"] == nil { request.headers.add("Connection", "close") }
        self.request = request
        self.timeout = timeout
        self.completion = completion
        // The method is a case-sensitive token (RFC 9110 §9.1): compared as bytes.
        parser = HTTPResponseParser(limits: client.limits, headRequest: request.method.bytesEqual("HEAD"))
    }

    /// Abandons the exchange: closes the socket, cancels its timers; the completion will
    /// not run. Harmless after completion.
    func cancel() {
        completion = nil
        cleanup()
        phase = .done
    }

    /// Starts on the next turn, so the completion never runs inside `send`.
    func schedule() {
        startedAt = loop.now
        deadline = startedAt + timeout
        timer = loop.schedule(after: .zero) { [self] in self.begin() }
    }

    func begin() {
        timer = loop.schedule(at: deadline) { [self] in
            self.finish(.failure(.timeout(self.request.url, self.timeout, phase: self.timeoutWords)))
        }
        if request.url.secure {
            // Fail before any connection when there is no way to verify the server.
            do throws(HTTPClientError) {
                _ = try client.trustStore()
                _ = try client.tlsRandom()
            } catch {
                return finish(.failure(error))
            }
        }
        if let ip = IPAddress(request.url.host) {
            addresses = [SocketAddress(ip: ip, port: request.url.port)]
            phase = .connecting
            return connectNext()
        }
        phase = .resolving
        do throws(HTTPClientError) {
            lookup = try client.lookup(request.url.host, port: request.url.port) { [self] result in self.resolved(result) }
        } catch {
            finish(.failure(error))
        }
    }

    /// On the loop, when the resolver thread answered in time.
    func resolved(_ result: Result<[SocketAddress], Resolver.Failure>) {
        lookup = nil
        guard phase == .resolving else { return }
        switch result {
        case .failure(let e):
            finish(.failure(.resolve(e)))
        case .success(let a):
            addresses = a
            phase = .connecting
            connectNext()
        }
    }

    /// The phase for a timeout, with the resolver's state when that is where it stuck.
    var timeoutWords: String {
        guard phase == .resolving, let r = client.resolver, r.queued > 0, r.threadsInUse >= r.maxThreads else { return phase.words }
        return "resolving the host name: the resolver has not answered \(r.threadsInUse) earlier lookups"
    }

    /// Tries the next address; reports all the failures when none is left.
    func connectNext() {
        while nextAddress < addresses.count {
            let address = addresses[nextAddress]
            nextAddress += 1
            let s: TCPSocket
            do throws(SystemError) {
                s = try TCPSocket.connect(to: address)
            } catch {
                // E.g. no IPv6 route on this board: go straight to the next address.
                connectErrors.append(error)
                continue
            }
            socket = s
            source = loop.watch(fd: s.fd, events: Int16(POLLOUT)) { [self] revents in self.ready(revents) }
            let left = addresses.count - nextAddress
            if left > 0 {
                let share = (deadline - loop.now) / Int64(left + 1)
                attemptTimer = loop.schedule(after: share) { [self] in
                    self.attemptTimer = nil
                    self.connectFailed(SystemError("connect \(address)", code: ETIMEDOUT))
                }
            }
            return
        }
        finish(.failure(.connect(connectErrors)))
    }

    func connectFailed(_ error: SystemError) {
        connectErrors.append(error)
        closeSocket()
        connectNext()
    }

    func ready(_ revents: Int16) {
        guard let socket, phase != .done else { return }
        if phase == .connecting {
            do throws(SystemError) {
                try socket.finishConnect()
            } catch {
                return connectFailed(error)
            }
            if let attemptTimer { loop.cancel(attemptTimer) }
            attemptTimer = nil
            connectTime = loop.now - startedAt
            client.log?("\(request.method) \(request.url): connected to \(socket.remote) in \(connectTime?.milliseconds ?? 0) ms")
            if request.url.secure {
                guard startTLS() else { return }
            } else {
                phase = .exchanging
                outgoing = request.serialize()
            }
        }
        if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
            receive()
        }
        // Write at once what connecting or reading produced (the request, TLS records):
        // a send that would block takes nothing and POLLOUT brings us back.
        if phase != .done && !outgoing.isEmpty {
            guard flush() else { return }
        }
        updateInterest()
    }

    func startTLS() -> Bool {
        let configuration: TLSClientConfiguration
        let client: TLSClient
        do throws(HTTPClientError) {
            // The handshake is bounded by our own deadline; TLSClient's is set past it
            // so the error names the whole exchange's timeout.
            configuration = TLSClientConfiguration(
                hostname: request.url.host, trust: try self.client.trustStore(),
                pins: (self.client.pinsApply?(request.url) ?? true) ? self.client.pins : [],
                validationTime: self.client.realtime(), handshakeTimeout: (deadline - loop.now) + .seconds(1))
            let random = try self.client.tlsRandom()
            do throws(TLSError) {
                client = try TLSClient(configuration: configuration, random: random)
            } catch {
                throw HTTPClientError.tls(error)
            }
        } catch {
            finish(.failure(error))
            return false
        }
        tls = client
        phase = .handshaking
        client.start(now: loop.now)
        pumpTLS()
        return phase != .done
    }

    /// Drains the TLS client's output: records to send, plaintext to parse, the end.
    func pumpTLS() {
        while let tls, phase != .done {
            switch tls.pollOutput() {
            case .transmit(let bytes):
                outgoing += bytes
            case .event(.connected):
                handshakeTime = loop.now - startedAt - (connectTime ?? .zero)
                client.log?("\(request.method) \(request.url): \(tls.cipherSuite ?? "TLS") in \(handshakeTime?.milliseconds ?? 0) ms")
                phase = .exchanging
                do throws(TLSError) {
                    try tls.send(request.serialize())
                } catch {
                    return finish(.failure(.tls(error)))
                }
            case .event(.data(let bytes)):
                parse(bytes)
            case .event(.closed):
                // close_notify: a clean end, so a body delimited by the close is whole.
                endOfStream()
            case .event(.failed(let error)):
                // A TCP close without close_notify (.truncated) before the message's
                // framing ended is refused rather than risk a cut-off body.
                finish(.failure(.tls(error)))
            case .timeout:
                return
            }
        }
    }

    func parse(_ bytes: [UInt8]) {
        do throws(HTTPError) {
            if let response = try parser.feed(bytes) { finish(.success(response)) }
        } catch {
            finish(.failure(.http(error)))
        }
    }

    func endOfStream() {
        do throws(HTTPError) {
            finish(.success(try parser.finish()))
        } catch {
            finish(.failure(.http(error)))
        }
    }

    /// Writes what the kernel takes; false when the call ended on an error.
    func flush() -> Bool {
        guard let socket else { return false }
        do throws(SystemError) {
            let n = try outgoing.withBytes { (raw: UnsafeRawBufferPointer) throws(SystemError) in try socket.send(raw) }
            outgoing.removeFirst(n)
            return true
        } catch {
            finish(.failure(.io(error)))
            return false
        }
    }

    func receive() {
        if receiveBuffer.isEmpty { receiveBuffer = [UInt8](repeating: 0, count: 16_384) }
        var budget = ReadBudget.streamBytes
        while phase != .done, budget > 0, let socket {
            let got: Int?
            do throws(SystemError) {
                got = try receiveBuffer.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try socket.receive(into: raw) }
            } catch {
                return finish(.failure(.io(error)))
            }
            guard let n = got else { return }
            budget -= max(n, 1)
            if let tls {
                if n == 0 {
                    tls.handleEndOfStream(now: loop.now)
                } else {
                    tls.handleInput(Array(receiveBuffer[0..<n]), now: loop.now)
                }
                pumpTLS()
                if n == 0 { return }
            } else if n == 0 {
                return endOfStream()
            } else {
                parse(Array(receiveBuffer[0..<n]))
            }
        }
    }

    func updateInterest() {
        guard phase != .done, let source else { return }
        loop.update(source, events: Int16(POLLIN) | (outgoing.isEmpty ? 0 : Int16(POLLOUT)))
    }

    func finish(_ result: Result<HTTPResponse, HTTPClientError>) {
        guard phase != .done else { return }
        phase = .done
        if case .success(let response) = result {
            client.log?("\(request.method) \(request.url): \(response.status) in \((loop.now - startedAt).milliseconds) ms")
        }
        // Courtesy close_notify (RFC 5246 §7.2.1), best effort: one non-blocking write.
        if let tls, tls.state == .connected, let socket {
            tls.close()
            var bytes: [UInt8] = []
            while case .transmit(let b) = tls.pollOutput() { bytes += b }
            _ = try? bytes.withBytes { (raw: UnsafeRawBufferPointer) throws(SystemError) in try socket.send(raw) }
        }
        cleanup()
        let deliver = completion
        completion = nil
        deliver?(result)
    }

    func closeSocket() {
        if let source { loop.unwatch(source) }
        if let attemptTimer { loop.cancel(attemptTimer) }
        source = nil
        attemptTimer = nil
        socket = nil
        tls = nil
        outgoing = []
    }

    func cleanup() {
        if let lookup { client.resolver?.cancel(lookup) }
        lookup = nil
        closeSocket()
        if let timer { loop.cancel(timer) }
        timer = nil
    }
}
