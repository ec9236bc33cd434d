import Testing
import Foundation
import Glibc
@testable import linnet
@testable import Runtime

// The messages testers saw: `linnet check` against providers that want a
// token, push-to-talk as a warning, the exit-status rule, capped Retry-After waits, a
// rejected data channel, a missing sound card. The providers here are scripted with
// Python's standard library only (no aiortc): each answers what a broken or strict
// provider would.

/// A scripted HTTP provider on loopback (`python3`, standard library only).
///
/// Modes: `auth` (401 unless `Authorization: Bearer right`, else 204), `ok` (204 to
/// everything), `http-garbage` (bytes that are not HTTP), `sdp-garbage` (201 with a body
/// that is not SDP), `retry-after` (503 with `Retry-After: 999999999`),
/// `reject-datachannel` (a real answer to the offer with `m=application 0`).
final class StubProvider {
    static let script = #"""
    import http.server, signal, sys
    # The test runner's threads block SIGTERM and children inherit the mask.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    mode = sys.argv[1]

    def answer(offer):
        out, data_mid = [], None
        lines = offer.replace('\r\n', '\n').split('\n')
        section = None
        for line in lines:
            if line.startswith('m='):
                section = line.split(' ')[0][2:]
            if section == 'application' and line.startswith('a=mid:'):
                data_mid = line[6:]
        section = None
        for line in lines:
            if not line:
                continue
            if line.startswith('m='):
                section = line.split(' ')[0][2:]
                if section == 'application':
                    parts = line.split(' ')
                    parts[1] = '0'
                    line = ' '.join(parts)
            if line.startswith('a=group:BUNDLE') and data_mid is not None:
                line = ' '.join(p for p in line.split(' ') if p != data_mid)
            if line.startswith('a=candidate') or line.startswith('a=end-of-candidates'):
                continue
            if line.startswith('a=ice-ufrag:'):
                line = 'a=ice-ufrag:stub'
            if line.startswith('a=ice-pwd:'):
                line = 'a=ice-pwd:stubstubstubstubstubstub'
            if line == 'a=setup:actpass':
                line = 'a=setup:passive'
            out.append(line)
        return '\r\n'.join(out) + '\r\n'

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'
        def reply(self, status, body=b'', headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def handle_any(self):
            body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
            print('REQUEST', self.command, self.path, self.headers.get('Authorization', '-'), flush=True)
            if mode == 'auth':
                if self.headers.get('Authorization') != 'Bearer right':
                    return self.reply(401, b'{"error": "unauthorized"}', [('Content-Type', 'application/json')])
                return self.reply(204)
            if mode == 'ok':
                return self.reply(204)
            if mode == 'http-garbage':
                self.wfile.write(b'this is not HTTP at all\r\n\r\n')
                self.close_connection = True
                return
            if self.command != 'POST':
                return self.reply(204)
            if mode == 'sdp-garbage':
                return self.reply(201, b'this is not an SDP answer\r\n', [('Content-Type', 'application/sdp'), ('Location', '/whip/1')])
            if mode == 'retry-after':
                return self.reply(503, b'busy', [('Retry-After', '999999999')])
            if mode == 'reject-datachannel':
                return self.reply(201, answer(body.decode()).encode(), [('Content-Type', 'application/sdp'), ('Location', '/whip/1')])
            return self.reply(500)
        do_GET = do_POST = do_OPTIONS = do_DELETE = do_PATCH = handle_any
        def log_message(self, *a):
            pass

    s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
    print('READY', s.server_address[1], flush=True)
    s.serve_forever()
    """#

    let process: LineProcess
    let port: Int
    var url: String { "http://127.0.0.1:\(port)/whip" }

    init(_ mode: String) throws {
        process = try LineProcess("/usr/bin/python3", ["-c", Self.script, mode], stderr: temporary("stub-\(mode).log"))
        guard let ready = process.waitFor({ $0.hasPrefix("READY ") }), let p = Int(ready.dropFirst(6)) else {
            throw NSError(domain: "the stub provider did not start", code: 1)
        }
        port = p
    }

    deinit { process.stop() }
}

/// The line of `check`'s output that starts with `what: `.
func checkLine(_ out: String, _ what: String) -> String {
    out.split(separator: "\n").map(String.init).first { $0.hasPrefix(what + ": ") } ?? "(no \(what) line)"
}
