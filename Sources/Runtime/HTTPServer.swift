// A minimal HTTP/1.1 server on the poll loop (one request per connection), for the
// built-in answerer: Signaling's request parser fed from accepted sockets.
import CSystem
import Wire
import Platform
import Signaling

/// A minimal HTTP/1.1 server on the loop: one request per connection, answered by
/// `handler`, which may answer later (it gets a `respond` function).
public final class HTTPServer {
    typealias Handler = (_ request: HTTPServerRequest, _ from: SocketAddress, _ respond: @escaping (HTTPResponse) -> Void) -> Void

    let loop: EventLoop
    let listener: TCPListener
    let handler: Handler
    var connections: [Int32: Connection] = [:]
    /// errno values of failed accepts already said (EMFILE fails every accept after it).
    var acceptFailures: [Int32] = []

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
            let accepted: TCPSocket?
            do throws(SystemError) { accepted = try listener.accept() } catch {
                // A client that gave up before its turn (ECONNABORTED) is its own affair;
                // anything else (EMFILE, ENOBUFS) keeps every client out: said once.
                if error.code != ECONNABORTED, !acceptFailures.contains(error.code) {
                    acceptFailures.append(error.code)
                    Log.warning("the HTTP server at \(address) could not accept a connection: \(error)")
                }
                return
            }
            guard let socket = accepted else { return }
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
        // A failed read (ECONNRESET) is the client's hang-up: its connection ends
        // without a word, as one that closes cleanly does.
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
        // A refused write (EPIPE, ECONNRESET) means the client left: nobody to tell.
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
