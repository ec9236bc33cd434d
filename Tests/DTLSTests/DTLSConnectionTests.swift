import Testing
import Wire
@testable import DTLS

/// Two connections wired back to back in memory on a manual clock.
final class Pair {
    let client: DTLSConnection
    let server: DTLSConnection
    var now = Instant(nanoseconds: 1_000_000_000)
    var clientEvents: [DTLSEvent] = []
    var serverEvents: [DTLSEvent] = []
    var clientTimeout = Instant.distantFuture
    var serverTimeout = Instant.distantFuture
    /// Decides whether a datagram (client→server when `toServer`) is lost.
    var drop: (_ toServer: Bool, _ index: Int) -> Bool = { _, _ in false }
    /// Replaces a datagram that survived `drop` by what is delivered instead (refragmented,
    /// reordered, duplicated…); nil delivers it as it is.
    var rewrite: ((_ toServer: Bool, _ datagram: [UInt8]) -> [[UInt8]])? = nil
    /// Every datagram sent, per direction (index 0: client → server), before `drop`.
    var wire: [[[UInt8]]] = [[], []]
    var sent = [0, 0]

    init(clientSees: [CertificateFingerprint]? = nil, serverSees: [CertificateFingerprint]? = nil, clientMTU: UInt16 = 1280) throws {
        let random = try CryptoRandom()
        let clientID = try Identity(random: random), serverID = try Identity(random: random)
        client = try DTLSConnection(role: .client, identity: clientID, random: random,
                                    remoteFingerprints: clientSees ?? [CertificateFingerprint(algorithm: .sha256, bytes: serverID.fingerprint)],
                                    mtu: clientMTU)
        server = try DTLSConnection(role: .server, identity: serverID, random: random,
                                    remoteFingerprints: serverSees ?? [CertificateFingerprint(algorithm: .sha256, bytes: clientID.fingerprint)])
    }

    /// Drains both sides, delivering datagrams immediately, until nothing moves.
    func pump() {
        var moved = true
        while moved {
            moved = false
            for toServer in [true, false] {
                let from = toServer ? client : server
                let to = toServer ? server : client
                loop: while true {
                    switch from.pollOutput() {
                    case .transmit(let d):
                        moved = true
                        let index = sent[toServer ? 0 : 1]
                        sent[toServer ? 0 : 1] += 1
                        wire[toServer ? 0 : 1].append(d)
                        guard !drop(toServer, index) else { continue }
                        for x in rewrite?(toServer, d) ?? [d] { to.handleInput(x, now: now) }
                    case .event(let e):
                        if toServer { clientEvents.append(e) } else { serverEvents.append(e) }
                    case .timeout(let t):
                        if toServer { clientTimeout = t } else { serverTimeout = t }
                        break loop
                    }
                }
            }
        }
    }

    /// Advances the clock to the earliest pending timeout and fires it.
    func advance() {
        let next = min(clientTimeout, serverTimeout)
        guard next < .distantFuture else { return }
        now = max(now, next)
        if clientTimeout <= now { client.handleTimeout(now: now) }
        if serverTimeout <= now { server.handleTimeout(now: now) }
        pump()
    }

    func connect(maxSteps: Int = 50) {
        server.start(now: now)
        client.start(now: now)
        pump()
        var steps = 0
        while !(client.state == .connected && server.state == .connected), steps < maxSteps,
              client.state != .failed, server.state != .failed {
            advance()
            steps += 1
        }
    }
}

func keys(_ events: [DTLSEvent]) -> SRTPKeyMaterial? {
    for case .connected(let k) in events { return k }
    return nil
}

@Suite struct DTLSConnectionTests {
    @Test func handshakeExportsMirroredSRTPKeys() throws {
        let pair = try Pair()
        pair.connect()
        #expect(pair.client.state == .connected)
        #expect(pair.server.state == .connected)
        let c = try #require(keys(pair.clientEvents)), s = try #require(keys(pair.serverEvents))
        #expect(c.localKey.count == 16 && c.localSalt.count == 14)
        // What one side sends with is what the other receives with (RFC 5764 §4.2).
        #expect(c.localKey == s.remoteKey && c.localSalt == s.remoteSalt)
        #expect(c.remoteKey == s.localKey && c.remoteSalt == s.localSalt)
        #expect(c.localKey != c.remoteKey)
        // Nothing was retransmitted: the clock never had to move.
        #expect(pair.now == Instant(nanoseconds: 1_000_000_000))
    }

    @Test func applicationDataBothWaysAndCloseNotify() throws {
        let pair = try Pair()
        pair.connect()
        let big = (0..<1100).map { UInt8(truncatingIfNeeded: $0) }
        try pair.client.send([1, 2, 3])
        try pair.server.send(big)
        pair.pump()
        #expect(pair.serverEvents.contains(.data([1, 2, 3])))
        #expect(pair.clientEvents.contains(.data(big)))
        pair.client.close()
        pair.pump()
        #expect(pair.serverEvents.last == .closed)
        #expect(pair.clientEvents.last == .closed)
        #expect(throws: DTLSError.notConnected) { try pair.client.send([1]) }
    }

    /// The first flights are lost; retransmission on the manual clock completes the
    /// handshake, and it waited at least the initial 500 ms timeout to do so.
    @Test(arguments: [(true, 0), (false, 0), (true, 1), (false, 1)])
    func lossIsRecoveredByRetransmission(toServer: Bool, index: Int) throws {
        let pair = try Pair()
        pair.drop = { direction, i in direction == toServer && i == index }
        let start = pair.now
        pair.connect()
        #expect(pair.client.state == .connected)
        #expect(pair.server.state == .connected)
        #expect(pair.now - start >= .milliseconds(500))
        #expect(keys(pair.clientEvents) != nil)
    }

    /// A server whose SDP fingerprint for the client is wrong refuses the handshake and
    /// exports no keys; so does a client that expects another server.
    @Test(arguments: [true, false])
    func fingerprintMismatchFails(wrongOnServer: Bool) throws {
        let wrong = [CertificateFingerprint(algorithm: .sha256, bytes: [UInt8](repeating: 0xAB, count: 32))]
        let pair = try wrongOnServer ? Pair(serverSees: wrong) : Pair(clientSees: wrong)
        pair.connect()
        let refusing = wrongOnServer ? pair.serverEvents : pair.clientEvents
        #expect(refusing.contains(.failed(.fingerprintMismatch)))
        #expect(keys(pair.clientEvents) == nil || keys(pair.serverEvents) == nil)
        #expect(keys(refusing) == nil)
    }

    @Test func fingerprintParsing() {
        let hex = (0..<32).map { _ in "AB" }.joined(separator: ":")
        #expect(CertificateFingerprint(hashName: "sha-256", hex: hex)?.bytes.count == 32)
        #expect(CertificateFingerprint(hashName: "SHA-256", hex: hex) != nil)
        #expect(CertificateFingerprint(hashName: "sha-1", hex: "AB:CD") == nil)
        #expect(CertificateFingerprint(hashName: "sha-384", hex: hex) == nil)  // wrong length
        #expect(CertificateFingerprint(hashName: "sha-256", hex: "zz") == nil)
    }

    /// Garbage where DTLS records should be is ignored without ending the connection.
    @Test func garbageRecordsAreIgnored() throws {
        let pair = try Pair()
        pair.connect()
        pair.server.handleInput([23, 0xFE, 0xFD] + [UInt8](repeating: 0x41, count: 40), now: pair.now)
        pair.server.handleInput([], now: pair.now)
        pair.server.handleInput([22], now: pair.now)
        pair.pump()
        #expect(pair.server.state == .connected)
        try pair.client.send([9])
        pair.pump()
        #expect(pair.serverEvents.contains(.data([9])))
    }

    @Test func noFingerprintIsRefusedUpFront() throws {
        let random = try CryptoRandom()
        #expect(throws: DTLSError.noFingerprint) {
            _ = try DTLSConnection(role: .client, identity: try Identity(random: random), random: random, remoteFingerprints: [])
        }
    }
}
