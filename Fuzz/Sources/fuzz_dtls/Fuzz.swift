import FuzzSupport

// DTLS datagrams (RFC 6347) as Peer hands them to DTLSConnection after the RFC 7983
// first-byte demux (20–63). Linnet parses no DTLS itself: record framing, handshake
// reassembly and everything after are mbedtls 2.28 (Debian's build, which carries no
// coverage instrumentation, so libFuzzer is blind inside it; this target exercises our
// in-memory BIO glue, timer callbacks and the verify and export callbacks against
// whatever mbedtls makes of hostile input, under ASan).
//
// Input: one byte whose low bit picks the role (client: we sent a ClientHello first;
// server: we wait for one), then pieces (2-byte length + bytes), one datagram each, with
// the clock stepped 600 ms between them so retransmission timers fire too.
// Invariant: the handshake never completes. The expected peer fingerprint is one no
// certificate has (all zero), so `.connected` would mean authentication was bypassed.

let random = try! CryptoRandom(personalization: "linnet-fuzz")
let identity = try! Identity(random: random)
let nobody = [CertificateFingerprint(algorithm: .sha256, bytes: [UInt8](repeating: 0, count: 32))]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    guard let first = bytes.first else { return 0 }
    let role: DTLS.DTLSRole = first & 1 == 0 ? .client : .server
    let connection: DTLSConnection
    do throws(DTLSError) {
        connection = try DTLSConnection(role: role, identity: identity, random: random, remoteFingerprints: nobody)
    } catch {
        invariant(false, "cannot make a connection: \(error)")
        return 0
    }
    var now = Instant(nanoseconds: 1_000_000_000)
    connection.start(now: now)
    func drain() {
        for _ in 0..<1000 {
            switch connection.pollOutput() {
            case .transmit: continue
            case .event(let e):
                if case .connected = e { invariant(false, "handshake completed with an unknown certificate") }
                continue
            case .timeout(let t):
                if t <= now { connection.handleTimeout(now: now); continue }  // cannot loop: the timer moves on
                return
            }
        }
        invariant(false, "output never settles")
    }
    drain()
    for datagram in Pieces(Array(bytes.dropFirst())) {
        connection.handleInput(datagram, now: now)
        drain()
        now = now + .milliseconds(600)
        connection.handleTimeout(now: now)
        drain()
    }
    connection.close()
    drain()
    return 0
}
