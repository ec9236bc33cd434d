// The HTTP(S) client on the poll loop: `HTTPClient` (the trust anchors, the DRBG, the
// pins and the resolver threads, made once per process) and the one-shot
// `HTTPExchange`. Each request runs as an `HTTPCall` (HTTPCall.swift); its failures
// are `HTTPClientError`s (HTTPClientError.swift). The design below covers all three.
//
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
import DTLS

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

/// The one-shot form the session code uses: forwards to a throwaway `HTTPClient` with
/// the system CA bundle and no pins. Prefer one long-lived `HTTPClient`.
public enum HTTPExchange {
    @discardableResult
    static func start(loop: EventLoop, request: HTTPRequest, timeout: Duration = .seconds(10),
                      completion: @escaping (Result<HTTPResponse, HTTPClientError>) -> Void) -> HTTPCall {
        HTTPClient(loop: loop).send(request, timeout: timeout, completion: completion)
    }
}
