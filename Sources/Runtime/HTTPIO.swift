// HTTP and HTTPS over TCP on the poll loop: the IO half of Signaling's sans-IO HTTP codec
// and TLS client. One request per connection (Connection: close), which is all
// signaling needs: a handful of requests per session, minutes apart.
//
// Design decisions:
// - `HTTPClient` is created once (it owns the parsed CA bundle, the DRBG and the pins)
//   and `send` starts one `HTTPCall` per request. Everything runs on the loop thread;
//   the completion runs exactly once, on the loop, never inside `send` itself, and
//   never after `cancel()`.
// - One deadline covers resolve + connect + TLS handshake + request + response.
// - Name resolution is the system's getaddrinfo (`Resolver`: /etc/hosts, nsswitch,
//   IPv4 and IPv6 all apply), run on a resolver thread (`BackgroundResolver`), never on
//   the loop: a resolver that stops answering once froze the loop 10 s per lookup
//   (audio lost, watchdog pings withheld, the final DELETE past TimeoutStopSec). The
//   deadline bounds the lookup like every other phase; a lookup that never returns is
//   abandoned to its thread, and at most `maxResolverThreads` such threads can pile up.
//   IP literals are used as they are, with no thread.
// - "Happy Eyeballs lite": the addresses are tried one after the other in resolver
//   order (RFC 6724 order from glibc). Each attempt but the last gets an equal share
//   of the time left, so a black-holed first address cannot eat the whole deadline.
// - TLS verification cannot be switched off: there is no option for it. The system
//   bundle (/etc/ssl/certs/ca-certificates.crt) plus an optional extra CA file are the
//   trust anchors; SPKI pins are checked in addition, never instead. Certificate
//   validity is judged against CLOCK_REALTIME read when the TLS handshake starts.
// - Bounded memory: the codec's `HTTPLimits` (16 KiB of headers, 1 MiB of body by
//   default) are enforced while bytes arrive.
// - No logging of its own; an optional `log` hook receives one-line traces that carry
//   the method, URL, peer address and timings, never header values or bodies (where the
//   bearer token lives).
import CSystem
import Wire
import Platform
import Signaling
import Agent
import DTLS

/// Why an HTTP exchange failed, worded for the log.
public enum HTTPClientError: Error, CustomStringConvertible {
    /// getaddrinfo found no address.
    case resolve(Resolver.Failure)
    /// Every address refused or failed: one error per address tried, in order.
    case connect([SystemError])
    /// The connection failed after it was established (reset, …).
    case io(SystemError)
    /// The response is not acceptable HTTP (malformed, too large, truncated).
    case http(HTTPError)
    /// The deadline passed; `phase` says where the exchange was.
    case timeout(HTTPURL, Duration, phase: String)
    /// The TLS handshake or connection failed, including a refused certificate (whose
    /// description names the problem: expired, other host, unknown CA, pin mismatch).
    case tls(TLSError)
    /// An https URL was used but there are no trust anchors: the system CA bundle is
    /// missing (install `ca-certificates`) and no CA file was configured.
    case noTrustStore(path: String)
    /// The system CA bundle exists but could not be read or parsed.
    case badTrustStore(path: String, reason: String)
    /// The configured extra CA file cannot be read or holds no certificate.
    case caFile(path: String, reason: String)

    /// True when retrying soon cannot help and a person must act: no or bad trust
    /// anchors, or a refused certificate (wrong CA, host, pin, expired, or a board clock
    /// that is not set). The session supervisor backs off long on these, like on 401/403.
    var isConfigurationProblem: Bool {
        switch self {
        case .noTrustStore, .badTrustStore, .caFile: return true
        case .tls(.certificateRejected), .tls(.invalidHostname): return true
        default: return false
        }
    }

    public var description: String {
        switch self {
        case .resolve(let f): return f.description
        case .connect(let errors):
            var text = "cannot connect: "
            for (i, e) in errors.enumerated() { text += (i == 0 ? "" : "; ") + e.description }
            return errors.isEmpty ? "cannot connect: no address" : text
        case .io(let e): return "connection failed: \(e)"
        case .http(let e): return e.description
        case .timeout(let url, let d, let phase): return "no answer from \(url) within \(d) (\(phase))"
        case .tls(let e): return e.description
        case .noTrustStore(let path):
            return "https needs trusted CA certificates: \(path) is missing (install ca-certificates, or set a CA file)"
        case .badTrustStore(let path, let reason): return "cannot use the CA bundle \(path): \(reason)"
        case .caFile(let path, let reason): return "cannot use the CA file \(path): \(reason)"
        }
    }
}

/// Makes HTTP(S) requests on the loop. Create one per process and keep it: it parses
/// the CA bundle once (on the first https request) and seeds one DRBG.
public final class HTTPClient {
    /// Debian's (and most distributions') concatenated PEM bundle of trusted CAs.
    public static let systemBundlePath = "/etc/ssl/certs/ca-certificates.crt"
    /// The CA bundle is about 200 KB; refuse anything absurdly larger.
    static let maxTrustFileBytes = 8 * 1024 * 1024

    let loop: EventLoop
    let pins: [SPKIPin]
    let limits: HTTPLimits
    let systemBundle: String
    let caFilePath: String?
    let caFileBytes: [UInt8]?
    /// Parsed on first https use; cached.
    var trust: TLSTrustStore?
    var random: TLSRandom?

    /// Which hosts the pins apply to (`RouteClient.pinsApply`): nil, every https host.
    public var pinsApply: ((HTTPURL) -> Bool)?
    /// Receives one-line traces (connected, TLS suite, status and timings). Never
    /// header values or bodies. Set it to `{ Log.debug($0) }` for a debug log.
    public var log: ((String) -> Void)?
    /// Test seams: the resolver and the wall clock (Unix seconds) used for certificate
    /// validity. `resolve` runs on a resolver thread, not on the loop (IP literals never
    /// reach it).
    var resolve: (String, UInt16) throws(Resolver.Failure) -> [SocketAddress] = { (host: String, port: UInt16) throws(Resolver.Failure) -> [SocketAddress] in
        try Resolver.resolve(host, port: port)
    }
    var realtime: () -> Int64 = { RealtimeClock.unixSeconds() }
    /// Lookups that may block at once; past that, lookups wait for a thread (bounded by
    /// their request's deadline).
    var maxResolverThreads = 4
    /// Created on the first name lookup.
    private(set) var resolver: BackgroundResolver?

    /// - Parameters:
    ///   - caFile: a PEM (or DER) file of extra CAs trusted on top of the system bundle
    ///     (a private backend's CA). Read and checked now: a bad file is a start-up error.
    ///   - pins: SPKI pins (RFC 7469 pin-sha256) every https server must match, on top
    ///     of a valid chain. Empty: no pinning.
    ///   - systemBundle: where the system CA bundle lives (tests point it elsewhere).
    public init(loop: EventLoop, caFile: String?, pins: [SPKIPin], limits: HTTPLimits = HTTPLimits(),
         systemBundle: String = HTTPClient.systemBundlePath) throws(HTTPClientError) {
        self.loop = loop
        self.pins = pins
        self.limits = limits
        self.systemBundle = systemBundle
        caFilePath = caFile
        if let caFile {
            let bytes: [UInt8]
            do throws(FileReadError) {
                bytes = try readRegularFile(caFile, limit: Self.maxTrustFileBytes).bytes
            } catch {
                throw .caFile(path: caFile, reason: error.reason)
            }
            do throws(TLSError) {
                _ = try TLSTrustStore(pem: bytes)
            } catch {
                throw .caFile(path: caFile, reason: error.description)
            }
            caFileBytes = bytes
        } else {
            caFileBytes = nil
        }
    }

    /// A client for plain http and the system bundle only (cannot fail).
    public init(loop: EventLoop) {
        self.loop = loop
        pins = []
        limits = HTTPLimits()
        systemBundle = Self.systemBundlePath
        caFilePath = nil
        caFileBytes = nil
    }

    /// Starts `request`; `completion` runs once on the loop with the response (any
    /// status: redirects and errors are the caller's to interpret) or the failure.
    /// `timeout` bounds the whole exchange. Cancel the returned call to abandon it:
    /// then the completion never runs and the socket and timers are released at once.
    @discardableResult
    public func send(_ request: HTTPRequest, timeout: Duration = .seconds(10),
              completion: @escaping (Result<HTTPResponse, HTTPClientError>) -> Void) -> HTTPCall {
        let call = HTTPCall(client: self, request: request, timeout: timeout, completion: completion)
        call.schedule()
        return call
    }

    /// Starts resolving `host` off the loop; `completion` runs on the loop unless the
    /// ticket is cancelled.
    func lookup(_ host: String, port: UInt16,
                completion: @escaping (Result<[SocketAddress], Resolver.Failure>) -> Void) throws(HTTPClientError) -> BackgroundResolver.Ticket {
        let r: BackgroundResolver
        if let resolver { r = resolver } else {
            do throws(SystemError) { r = try BackgroundResolver(loop: loop, maxThreads: maxResolverThreads) } catch {
                throw .io(error)
            }
            resolver = r
        }
        return r.resolve(host, port: port, using: resolve, completion: completion)
    }

    /// The trust anchors: system bundle + CA file, parsed once.
    func trustStore() throws(HTTPClientError) -> TLSTrustStore {
        if let trust { return trust }
        var store: TLSTrustStore? = nil
        var bundle: [UInt8]? = nil
        do throws(FileReadError) {
            bundle = try readRegularFile(systemBundle, limit: Self.maxTrustFileBytes).bytes
        } catch {
            // A missing bundle is fine when the CA file alone is the trust (a private CA).
            guard error.code == ENOENT else { throw .badTrustStore(path: systemBundle, reason: error.reason) }
            guard caFileBytes != nil else { throw .noTrustStore(path: systemBundle) }
        }
        if let bundle {
            do throws(TLSError) {
                store = try TLSTrustStore(pem: bundle)
            } catch {
                throw .badTrustStore(path: systemBundle, reason: error.description)
            }
        }
        do throws(TLSError) {
            if let extra = caFileBytes {
                if let store { try store.add(extra) } else { store = try TLSTrustStore(pem: extra) }
            }
        } catch {
            throw .caFile(path: caFilePath ?? "", reason: error.description)
        }
        guard let store else { throw .noTrustStore(path: systemBundle) }
        trust = store
        return store
    }

    func tlsRandom() throws(HTTPClientError) -> TLSRandom {
        if let random { return random }
        do throws(TLSError) {
            let r = try TLSRandom.tls()
            random = r
            return r
        } catch {
            throw .tls(error)
        }
    }
}

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

/// The one-shot form the session code uses: forwards to a throwaway `HTTPClient` with
/// the system CA bundle and no pins. Prefer one long-lived `HTTPClient`.
public enum HTTPExchange {
    @discardableResult
    static func start(loop: EventLoop, request: HTTPRequest, timeout: Duration = .seconds(10),
                      completion: @escaping (Result<HTTPResponse, HTTPClientError>) -> Void) -> HTTPCall {
        HTTPClient(loop: loop).send(request, timeout: timeout, completion: completion)
    }
}

/// A minimal HTTP/1.1 server on the loop: one request per connection, answered by
/// `handler`, which may answer later (it gets a `respond` function).
public final class HTTPServer {
    typealias Handler = (_ request: HTTPServerRequest, _ from: SocketAddress, _ respond: @escaping (HTTPResponse) -> Void) -> Void

    let loop: EventLoop
    let listener: TCPListener
    let handler: Handler
    var connections: [Int32: Connection] = [:]

    final class Connection {
        let socket: TCPSocket
        var parser = HTTPRequestParser()
        var outgoing: [UInt8] = []
        var source: EventLoop.SourceID?
        var answered = false
        init(socket: TCPSocket) { self.socket = socket }
    }

    init(loop: EventLoop, listen address: SocketAddress, handler: @escaping Handler) throws(SystemError) {
        self.loop = loop
        self.handler = handler
        listener = try TCPListener(bind: address)
        loop.watch(fd: listener.fd) { [self] _ in self.acceptAll() }
    }

    var address: SocketAddress { listener.localAddress }

    func acceptAll() {
        for _ in 0..<ReadBudget.accepts {
            guard let socket = try? listener.accept() else { return }
            let c = Connection(socket: socket)
            connections[socket.fd] = c
            c.source = loop.watch(fd: socket.fd) { [self] revents in self.readable(c, revents) }
            // A client that connects and never sends is dropped after 10 s.
            loop.schedule(after: .seconds(10)) { [self] in if !c.answered { self.close(c) } }
        }
    }

    func readable(_ c: Connection, _ revents: Int16) {
        if !c.outgoing.isEmpty { flush(c); return }
        var buffer = [UInt8](repeating: 0, count: 16_384)
        guard let n = try? buffer.withMutableBytes({ (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try c.socket.receive(into: raw) }) ?? nil else {
            if revents & Int16(POLLERR | POLLHUP) != 0 { close(c) }
            return
        }
        if n == 0 { close(c); return }
        guard !c.answered else { return }
        do throws(HTTPError) {
            if let request = try c.parser.feed(Array(buffer[0..<n])) {
                c.answered = true
                handler(request, c.socket.remote) { [self] response in self.send(response, on: c) }
            }
        } catch {
            c.answered = true
            send(HTTPResponse(status: 400, headers: HTTPHeaders([("Content-Type", "text/plain")]), body: Array((error.description + "\n").utf8)), on: c)
        }
    }

    func send(_ response: HTTPResponse, on c: Connection) {
        guard connections[c.socket.fd] != nil else { return }
        c.outgoing = response.serialize()
        if let s = c.source { loop.update(s, events: Int16(POLLOUT)) }
        flush(c)
    }

    func flush(_ c: Connection) {
        guard let n = try? c.outgoing.withBytes({ (raw: UnsafeRawBufferPointer) throws(SystemError) in try c.socket.send(raw) }) else {
            close(c)
            return
        }
        c.outgoing.removeFirst(n)
        if c.outgoing.isEmpty { close(c) }
    }

    func close(_ c: Connection) {
        if let s = c.source { loop.unwatch(s) }
        c.source = nil
        connections[c.socket.fd] = nil
    }
}
