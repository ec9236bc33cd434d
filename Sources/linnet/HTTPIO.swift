// HTTP over TCP on the poll loop: the IO half of Signaling's sans-IO HTTP codec.
// One request per connection (Connection: close), which is all signaling needs.
import CSystem
import Wire
import Platform
import Signaling

/// Why an HTTP exchange failed, worded for the log.
enum HTTPClientError: Error, CustomStringConvertible {
    case resolve(Resolver.Failure)
    case connect(SystemError)
    case io(SystemError)
    case http(HTTPError)
    case timeout(HTTPURL, Duration)
    case tlsUnavailable(HTTPURL)

    var description: String {
        switch self {
        case .resolve(let f): return f.description
        case .connect(let e): return "cannot connect: \(e)"
        case .io(let e): return "connection failed: \(e)"
        case .http(let e): return e.description
        case .timeout(let url, let d): return "no answer from \(url) within \(d)"
        case .tlsUnavailable(let url): return "\(url): https is not supported by this build yet"
        }
    }
}

/// One request and its response on its own TCP connection.
final class HTTPExchange {
    let loop: EventLoop
    let request: HTTPRequest
    let completion: (Result<HTTPResponse, HTTPClientError>) -> Void
    var socket: TCPSocket?
    var source: EventLoop.SourceID?
    var timer: EventLoop.TimerID?
    var pending: [UInt8]
    var parser: HTTPResponseParser
    var done = false
    var connecting = true

    /// Starts the exchange; `completion` runs once, on the loop.
    @discardableResult
    static func start(loop: EventLoop, request: HTTPRequest, timeout: Duration = .seconds(10),
                      completion: @escaping (Result<HTTPResponse, HTTPClientError>) -> Void) -> HTTPExchange {
        let exchange = HTTPExchange(loop: loop, request: request, completion: completion)
        exchange.begin(timeout: timeout)
        return exchange
    }

    init(loop: EventLoop, request: HTTPRequest, completion: @escaping (Result<HTTPResponse, HTTPClientError>) -> Void) {
        self.loop = loop
        self.request = request
        self.completion = completion
        pending = request.serialize()
        parser = HTTPResponseParser(headRequest: request.method == "HEAD")
    }

    func begin(timeout: Duration) {
        guard !request.url.secure else {
            // Deliver asynchronously so callers see one behaviour for every failure.
            loop.schedule(after: .zero) { self.finish(.failure(.tlsUnavailable(self.request.url))) }
            return
        }
        timer = loop.schedule(after: timeout) { self.finish(.failure(.timeout(self.request.url, timeout))) }
        let addresses: [SocketAddress]
        do throws(Resolver.Failure) {
            addresses = try Resolver.resolve(request.url.host, port: request.url.port)
        } catch {
            loop.schedule(after: .zero) { self.finish(.failure(.resolve(error))) }
            return
        }
        do throws(SystemError) {
            let s = try TCPSocket.connect(to: addresses[0])
            socket = s
            source = loop.watch(fd: s.fd, events: Int16(POLLOUT)) { [self] revents in self.ready(revents) }
        } catch {
            loop.schedule(after: .zero) { self.finish(.failure(.connect(error))) }
        }
    }

    func ready(_ revents: Int16) {
        guard let socket, let source, !done else { return }
        if connecting {
            do throws(SystemError) {
                try socket.finishConnect()
            } catch {
                finish(.failure(.connect(error)))
                return
            }
            connecting = false
            loop.update(source, events: Int16(POLLOUT | POLLIN))
        }
        do throws(SystemError) {
            if !pending.isEmpty {
                let n = try pending.withBytes { (raw: UnsafeRawBufferPointer) throws(SystemError) in try socket.send(raw) }
                pending.removeFirst(n)
                if pending.isEmpty { loop.update(source, events: Int16(POLLIN)) }
            }
            guard revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 else { return }
            var buffer = [UInt8](repeating: 0, count: 16_384)
            while !done {
                guard let n = try buffer.withMutableBytes({ (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try socket.receive(into: raw) }) else { return }
                if n == 0 {
                    do throws(HTTPError) { finish(.success(try parser.finish())) } catch { finish(.failure(.http(error))) }
                    return
                }
                do throws(HTTPError) {
                    if let response = try parser.feed(Array(buffer[0..<n])) { finish(.success(response)) }
                } catch {
                    finish(.failure(.http(error)))
                }
            }
        } catch {
            finish(.failure(.io(error)))
        }
    }

    func finish(_ result: Result<HTTPResponse, HTTPClientError>) {
        guard !done else { return }
        done = true
        if let source { loop.unwatch(source) }
        if let timer { loop.cancel(timer) }
        source = nil
        timer = nil
        socket = nil
        completion(result)
    }
}

/// A minimal HTTP/1.1 server on the loop: one request per connection, answered by
/// `handler`, which may answer later (it gets a `respond` function).
final class HTTPServer {
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
        while let socket = try? listener.accept() {
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
