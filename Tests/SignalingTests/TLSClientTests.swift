import CMbedTLS
import Foundation
import Testing
import Wire
@testable import Signaling

/// 2030-01-01T00:00:00Z: inside every fixture's validity except `expired`'s.
let validationTime: Int64 = 1_893_456_000
let host = "signal.linnet.test"

func pem(_ s: String) -> [UInt8] { Array(s.utf8) }

func trustRoot() throws -> TLSTrustStore {
    try TLSTrustStore(pem: pem(TLSFixtures.rootCertificate))
}

func makeClient(host: String = host, trust: TLSTrustStore? = nil, pins: [String] = [],
                at time: Int64 = validationTime, timeout: Wire.Duration = .seconds(15)) throws -> TLSClient {
    let configuration = TLSClientConfiguration(
        hostname: host, trust: try trust ?? trustRoot(), pins: try pins.map { try SPKIPin(base64: $0) },
        validationTime: time, handshakeTimeout: timeout)
    return try TLSClient(configuration: configuration, random: TLSRandom())
}

/// The EC leaf with its intermediate, as a public server sends them.
func goodServer(maxMinorVersion: Int32 = MBEDTLS_SSL_MINOR_VERSION_3, cipherSuites: [Int32]? = nil) throws -> TestTLSServer {
    try TestTLSServer(certificates: [TLSFixtures.leafEcCertificate, TLSFixtures.intermediateCertificate],
                      key: TLSFixtures.leafEcKey, maxMinorVersion: maxMinorVersion, cipherSuites: cipherSuites)
}

func handshake(_ client: TLSClient, _ server: TestTLSServer, chunk: Int = .max) -> [TLSEvent] {
    client.start(now: .zero)
    return exchange(client, server, chunk: chunk)
}

/// The problems of a `.failed(.certificateRejected)` in `events`, or nil.
func rejection(_ events: [TLSEvent]) -> [CertificateProblem]? {
    for case .failed(.certificateRejected(_, let problems)) in events { return problems }
    return nil
}

@Suite struct TLSHandshakeTests {
    @Test("handshake through an intermediate, then data both ways and close_notify from the server")
    func handshakeAndData() throws {
        let server = try goodServer()
        let client = try makeClient()
        #expect(handshake(client, server) == [.connected])
        #expect(client.state == .connected && server.handshakeResult == 0)
        // The server picks by its own preference; it must be one of ours, with ECDSA.
        #expect(client.cipherSuite?.hasPrefix("TLS-ECDHE-ECDSA-WITH-") == true)
        #expect(server.cipherSuite == client.cipherSuite)

        // Larger than one record (16 KiB) each way, patterned so any loss or
        // reordering of bytes shows.
        var rng = SeededRandom(seed: 7)
        let request = (0..<40_000).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        let reply = (0..<50_000).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        try client.send(request)
        #expect(exchange(client, server).isEmpty)
        #expect(server.received == request)

        try server.write(reply)
        var got: [UInt8] = []
        for event in exchange(client, server) {
            guard case .data(let bytes) = event else { Issue.record("unexpected \(event)"); continue }
            got += bytes
        }
        #expect(got == reply)

        server.closeNotify()
        #expect(exchange(client, server) == [.closed])
        #expect(client.state == .closed)
        // RFC 5246 §7.2.1: the client answered with its own close_notify.
        #expect(server.peerClosed)
        #expect(throws: TLSError.notConnected) { try client.send([1]) }
    }

    /// Each suite of ours, forced by a server that offers only it (IANA numbers and
    /// names from the TLS Cipher Suites registry; mbedtls spells them with dashes).
    @Test("every offered suite works against a server that offers only it",
          arguments: [(0xC02B, "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256", false),
                      (0xC02C, "TLS-ECDHE-ECDSA-WITH-AES-256-GCM-SHA384", false),
                      (0xCCA9, "TLS-ECDHE-ECDSA-WITH-CHACHA20-POLY1305-SHA256", false),
                      (0xC02F, "TLS-ECDHE-RSA-WITH-AES-128-GCM-SHA256", true),
                      (0xC030, "TLS-ECDHE-RSA-WITH-AES-256-GCM-SHA384", true),
                      (0xCCA8, "TLS-ECDHE-RSA-WITH-CHACHA20-POLY1305-SHA256", true)])
    func suites(number: Int32, name: String, rsa: Bool) throws {
        let server = rsa
            ? try TestTLSServer(certificates: [TLSFixtures.leafRsaCertificate, TLSFixtures.intermediateCertificate],
                                key: TLSFixtures.leafRsaKey, cipherSuites: [number])
            : try goodServer(cipherSuites: [number])
        let client = try makeClient()
        #expect(handshake(client, server) == [.connected])
        #expect(client.cipherSuite == name)
        try client.send(Array("ping".utf8))
        _ = exchange(client, server)
        #expect(server.received == Array("ping".utf8))
    }

    @Test("the stream split into single bytes both ways still works", arguments: [1, 3, 1000])
    func splitStream(chunk: Int) throws {
        let server = try goodServer()
        let client = try makeClient()
        #expect(handshake(client, server, chunk: chunk) == [.connected])
        try server.write(Array("HTTP/1.1 200 OK\r\n\r\n".utf8))
        let events = exchange(client, server, chunk: chunk)
        let bytes = events.flatMap { e -> [UInt8] in if case .data(let b) = e { return b } else { return [] } }
        #expect(String(decoding: bytes, as: UTF8.self) == "HTTP/1.1 200 OK\r\n\r\n")
    }

    @Test("close() sends close_notify")
    func clientClose() throws {
        let server = try goodServer()
        let client = try makeClient()
        _ = handshake(client, server)
        client.close()
        #expect(exchange(client, server) == [.closed])
        #expect(server.peerClosed)
    }

    @Test("a TLS 1.1-only server finds nothing in common with us")
    func tls11Server() throws {
        // Our AEAD suites exist only from TLS 1.2 on (RFC 5246 §1.2), so a 1.1 server
        // has no suite to pick and says handshake_failure.
        let server = try goodServer(maxMinorVersion: MBEDTLS_SSL_MINOR_VERSION_2)
        let client = try makeClient()
        #expect(handshake(client, server) == [.failed(.peerAlert(40))])
        #expect(client.state == .failed)
    }

    @Test("a ServerHello for TLS 1.1 is refused by the client itself: TLS 1.2 is the minimum")
    func serverHelloVersion() throws {
        let server = try goodServer()
        let client = try makeClient()
        client.start(now: .zero)
        guard case .transmit(let hello) = client.pollOutput() else { Issue.record("no ClientHello"); return }
        server.feed(hello)
        var flight = server.takeOutput()
        // Record header (5 bytes), handshake header (4), then server_version (RFC 5246 §7.4.1.3).
        #expect(Array(flight[0..<3]) == [22, 3, 3] && flight[5] == 2 && Array(flight[9..<11]) == [3, 3])
        flight[10] = 2
        client.handleInput(flight, now: .zero)
        _ = client.pollOutput()  // our protocol_version alert
        #expect(client.pollOutput() == .event(.failed(.protocolError(call: "mbedtls_ssl_handshake", code: MBEDTLS_ERR_SSL_BAD_HS_PROTOCOL_VERSION))))
    }

    @Test("no shared cipher suite: the server's handshake_failure alert is named")
    func noSharedCipher() throws {
        // TLS_RSA_WITH_AES_128_GCM_SHA256: no forward secrecy, so not in our list.
        let server = try TestTLSServer(certificates: [TLSFixtures.leafRsaCertificate, TLSFixtures.intermediateCertificate],
                                       key: TLSFixtures.leafRsaKey, cipherSuites: [0x009C])
        let client = try makeClient()
        let events = handshake(client, server)
        #expect(events == [.failed(.peerAlert(40))])
        #expect(TLSError.peerAlert(40).description
                == "TLS: the server refused the handshake: no cipher suite or version in common (we offer TLS 1.2 with ECDHE and AES-GCM or ChaCha20) (alert handshake_failure, 40)")
    }
}

@Suite struct TLSCertificateTests {
    @Test("a self-signed certificate is not trusted, and the server hears an alert")
    func selfSigned() throws {
        let server = try TestTLSServer(certificates: [TLSFixtures.selfSignedCertificate], key: TLSFixtures.selfSignedKey)
        let client = try makeClient()
        let events = handshake(client, server)
        #expect(rejection(events) == [.notTrusted])
        #expect(client.state == .failed)
        // mbedtls sent a fatal alert before giving up.
        #expect(server.handshakeResult == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE)
    }

    @Test("a certificate for another hostname is refused with the hostname reason")
    func otherHost() throws {
        let server = try TestTLSServer(certificates: [TLSFixtures.otherHostCertificate, TLSFixtures.intermediateCertificate],
                                       key: TLSFixtures.otherHostKey)
        let client = try makeClient()
        let events = handshake(client, server)
        #expect(rejection(events) == [.hostnameMismatch])
        let error = TLSError.certificateRejected(host: host, problems: [.hostnameMismatch])
        #expect(error.description == "TLS: certificate for 'signal.linnet.test' refused: issued for another hostname")
    }

    @Test("hostname matching: exact, case-insensitive, one-label wildcard only",
          arguments: [("signal.linnet.test", true), ("SIGNAL.Linnet.Test", true), ("a.voice.linnet.test", true),
                      ("a.b.voice.linnet.test", false), ("voice.linnet.test", false), ("linnet.test", false),
                      ("signal.linnet.test.evil", false)])
    func hostnames(name: String, accepted: Bool) throws {
        let server = try goodServer()
        let client = try makeClient(host: name)
        let events = handshake(client, server)
        if accepted {
            #expect(events == [.connected])
        } else {
            #expect(events == [.failed(.certificateRejected(host: name, problems: [.hostnameMismatch]))])
        }
    }

    @Test("a certificate from an untrusted CA with the same name as ours is refused")
    func untrustedCA() throws {
        let server = try TestTLSServer(certificates: [TLSFixtures.evilLeafCertificate, TLSFixtures.evilRootCertificate],
                                       key: TLSFixtures.evilLeafKey)
        let client = try makeClient()
        #expect(rejection(handshake(client, server)) == [.notTrusted])
    }

    @Test("without the intermediate the chain does not reach the root")
    func missingIntermediate() throws {
        let server = try TestTLSServer(certificates: [TLSFixtures.leafEcCertificate], key: TLSFixtures.leafEcKey)
        let client = try makeClient()
        #expect(rejection(handshake(client, server)) == [.notTrusted])
    }

    @Test("trusting the intermediate alone is enough (it is a trust anchor then)")
    func intermediateAnchor() throws {
        let server = try goodServer()
        let client = try makeClient(trust: TLSTrustStore(pem: pem(TLSFixtures.intermediateCertificate)))
        #expect(handshake(client, server) == [.connected])
    }

    @Test("a wrong pin is refused even though the chain is valid")
    func wrongPin() throws {
        let client = try makeClient(pins: [TLSFixtures.otherHostPin])
        #expect(rejection(handshake(client, try goodServer())) == [.pinMismatch])
        #expect(TLSError.certificateRejected(host: host, problems: [.pinMismatch]).description
                == "TLS: certificate for 'signal.linnet.test' refused: public key matches no configured pin")
    }

    @Test("a right pin (leaf, intermediate or root SPKI, computed by openssl) is accepted",
          arguments: [TLSFixtures.leafECPin, TLSFixtures.intermediatePin, TLSFixtures.rootPin])
    func rightPin(pin: String) throws {
        let client = try makeClient(pins: [TLSFixtures.otherHostPin, pin])
        #expect(handshake(client, try goodServer()) == [.connected])
    }

    @Test("a pin never replaces the chain: a self-signed certificate with its right pin is still refused")
    func pinDoesNotBypassChain() throws {
        let server = try TestTLSServer(certificates: [TLSFixtures.selfSignedCertificate], key: TLSFixtures.selfSignedKey)
        let client = try makeClient(pins: [TLSFixtures.selfSignedPin])
        #expect(rejection(handshake(client, server)) == [.notTrusted])
    }

    @Test("wrong host and wrong pin are both reported")
    func severalProblems() throws {
        let server = try TestTLSServer(certificates: [TLSFixtures.otherHostCertificate, TLSFixtures.intermediateCertificate],
                                       key: TLSFixtures.otherHostKey)
        let client = try makeClient(pins: [TLSFixtures.leafECPin])
        #expect(rejection(handshake(client, server)) == [.hostnameMismatch, .pinMismatch])
    }

    @Test("an expired certificate (2020–2021, dates from openssl) is refused at 2030")
    func expired() throws {
        let server = try TestTLSServer(certificates: [TLSFixtures.expiredCertificate, TLSFixtures.intermediateCertificate],
                                       key: TLSFixtures.expiredKey)
        let client = try makeClient()
        let problems = rejection(handshake(client, server))
        #expect(problems == [.expired(notAfter: TLSFixtures.expiredNotAfter)])
        #expect(TLSError.certificateRejected(host: host, problems: problems ?? []).description
                == "TLS: certificate for 'signal.linnet.test' refused: expired on 2021-01-01 00:00:00 UTC")
    }

    /// RFC 5280 §4.1.2.5: valid from notBefore through notAfter inclusive, judged at the
    /// caller's time, not the machine's.
    @Test("validity at the edges, against the caller's clock")
    func validityEdges() throws {
        let cases: [(Int64, [CertificateProblem]?)] = [
            (TLSFixtures.leafECNotBefore, nil),
            (TLSFixtures.leafECNotAfter, nil),
            (TLSFixtures.leafECNotAfter + 1, [.expired(notAfter: TLSFixtures.leafECNotAfter)]),
            (TLSFixtures.leafECNotBefore - 1, [.notYetValid(notBefore: TLSFixtures.leafECNotBefore)]),
            // An unset board clock (1970) reads as "not yet valid".
            (0, [.notYetValid(notBefore: TLSFixtures.leafECNotBefore)]),
        ]
        for (time, expected) in cases {
            let client = try makeClient(at: time)
            let events = handshake(client, try goodServer())
            if let expected {
                #expect(rejection(events) == expected, "at \(time)")
            } else {
                #expect(events == [.connected], "at \(time)")
            }
        }
        #expect(CertificateProblem.notYetValid(notBefore: TLSFixtures.leafECNotBefore).description
                == "not valid before 2025-01-01 00:00:00 UTC")
    }

    @Test("the server's expired certificate is refused even when its name and pin are right")
    func expiredWithPin() throws {
        let client = try makeClient(pins: [TLSFixtures.leafECPin], at: TLSFixtures.leafECNotAfter + 86_400)
        #expect(rejection(handshake(client, try goodServer())) == [.expired(notAfter: TLSFixtures.leafECNotAfter)])
    }
}

@Suite struct TLSMalformedInputTests {
    /// The client's state after its ClientHello has been answered with `bytes`.
    func answer(_ bytes: [UInt8]) throws -> [TLSEvent] {
        let client = try makeClient()
        client.start(now: .zero)
        guard case .transmit = client.pollOutput() else { throw TestTLSServer.Failure(code: 0) }
        client.handleInput(bytes, now: .zero)
        var events: [TLSEvent] = []
        while true {
            switch client.pollOutput() {
            case .transmit: continue
            case .event(let e): events.append(e)
            case .timeout: return events
            }
        }
    }

    @Test("seeded garbage instead of a ServerHello fails, never traps")
    func garbage() throws {
        var rng = SeededRandom(seed: 42)
        for round in 0..<200 {
            let count = 1 + Int(rng.next() % 600)
            var bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            // Half the time, a plausible handshake record header so the parser goes deeper.
            if round % 2 == 0 && count > 5 {
                bytes[0] = 22; bytes[1] = 3; bytes[2] = 3
                bytes[3] = UInt8((count - 5) >> 8); bytes[4] = UInt8((count - 5) & 0xFF)
            }
            let events = try answer(bytes)
            // A typed failure, or nothing yet while a record is incomplete.
            for e in events {
                guard case .failed = e else { Issue.record("round \(round): \(e)"); continue }
            }
            // A whole record of garbage can never be a valid ServerHello (a random
            // first byte is rarely a valid record header either).
            if round % 2 == 0 && count > 5 { #expect(events.count == 1, "round \(round)") }
        }
    }

    @Test("a record header claiming 65535 bytes fails at once")
    func oversizedRecord() throws {
        let events = try answer([22, 3, 3, 0xFF, 0xFF])
        #expect(events.count == 1)
        // mbedtls 2.28 says BAD_INPUT_DATA: the record would not fit its 16 KiB buffer.
        guard case .failed(.protocolError("mbedtls_ssl_handshake", let code)) = events.first else { Issue.record("\(events)"); return }
        #expect(code == MBEDTLS_ERR_SSL_BAD_INPUT_DATA || code == MBEDTLS_ERR_SSL_INVALID_RECORD)
    }

    @Test("a truncated server flight then EOF fails as truncated; without EOF the deadline fails it")
    func truncatedFlight() throws {
        let server = try goodServer()
        var client = try makeClient(timeout: .seconds(10))
        client.start(now: .zero)
        guard case .transmit(let hello) = client.pollOutput() else { Issue.record("no ClientHello"); return }
        server.feed(hello)
        let flight = server.takeOutput()
        #expect(flight.count > 100)
        client.handleInput(Array(flight[0..<(flight.count / 2)]), now: .zero + .milliseconds(5))
        #expect(client.pollOutput() == .timeout(.zero + .seconds(10)))
        client.handleEndOfStream(now: .zero + .milliseconds(6))
        #expect(client.pollOutput() == .event(.failed(.truncated)))

        client = try makeClient(timeout: .seconds(10))
        client.start(now: .zero)
        _ = client.pollOutput()
        client.handleInput(Array(flight[0..<(flight.count / 2)]), now: .zero + .milliseconds(5))
        client.handleTimeout(now: .zero + .milliseconds(9_999))
        #expect(client.pollOutput() == .timeout(.zero + .seconds(10)))
        client.handleTimeout(now: .zero + .seconds(10))
        #expect(client.pollOutput() == .event(.failed(.handshakeTimedOut)))
        #expect(client.pollOutput() == .timeout(.distantFuture))
    }

    @Test("half an application record then EOF: truncated, and no partial data")
    func truncatedRecord() throws {
        let server = try goodServer()
        let client = try makeClient()
        _ = handshake(client, server)
        try server.write(Array("a response body".utf8))
        let record = server.takeOutput()
        client.handleInput(Array(record[0..<(record.count - 4)]), now: .zero)
        #expect(client.pollOutput() == .timeout(.distantFuture))
        client.handleEndOfStream(now: .zero)
        #expect(client.pollOutput() == .event(.failed(.truncated)))
        #expect(client.state == .failed)
    }

    @Test("a flipped bit in an application record is a bad MAC, not data")
    func tamperedRecord() throws {
        let server = try goodServer()
        let client = try makeClient()
        _ = handshake(client, server)
        try server.write(Array("secret".utf8))
        var record = server.takeOutput()
        record[record.count - 3] ^= 0x01
        client.handleInput(record, now: .zero)
        var events: [TLSEvent] = []
        while case let output = client.pollOutput(), output != .timeout(.distantFuture) {
            if case .event(let e) = output { events.append(e) }
        }
        #expect(events == [.failed(.protocolError(call: "mbedtls_ssl_read", code: MBEDTLS_ERR_SSL_INVALID_MAC))])
    }

    @Test("seeded garbage after the handshake fails, never traps")
    func garbageAfterHandshake() throws {
        var rng = SeededRandom(seed: 99)
        for round in 0..<50 {
            let server = try goodServer()
            let client = try makeClient()
            _ = handshake(client, server)
            var bytes = (0..<(6 + Int(rng.next() % 300))).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if round % 2 == 0 {
                bytes[0] = 23; bytes[1] = 3; bytes[2] = 3
                bytes[3] = UInt8((bytes.count - 5) >> 8); bytes[4] = UInt8((bytes.count - 5) & 0xFF)
            }
            client.handleInput(bytes, now: .zero)
            var sawFailure = false
            while case let output = client.pollOutput(), output != .timeout(.distantFuture) {
                if case .event(let e) = output {
                    guard case .failed = e else { Issue.record("round \(round): \(e)"); continue }
                    sawFailure = true
                }
            }
            // A complete record of garbage can never authenticate.
            if round % 2 == 0 { #expect(sawFailure, "round \(round)") }
        }
    }

    @Test("send before the handshake is refused")
    func sendEarly() throws {
        let client = try makeClient()
        #expect(throws: TLSError.notConnected) { try client.send([1, 2, 3]) }
        client.start(now: .zero)
        #expect(throws: TLSError.notConnected) { try client.send([1, 2, 3]) }
    }
}

@Suite struct TLSConfigurationTests {
    @Test("hostnames that cannot be DNS names are refused up front")
    func badHostname() throws {
        for name in ["", "exa mple.com", "a/b", String(repeating: "a", count: 254)] {
            #expect(throws: TLSError.invalidHostname(name)) { _ = try makeClient(host: name) }
        }
    }

    @Test("a trust store from garbage or from nothing is an error")
    func badTrustStore() throws {
        #expect(throws: TLSError.self) { _ = try TLSTrustStore(pem: Array("not a certificate".utf8)) }
        #expect(throws: TLSError.self) { _ = try TLSTrustStore(pem: []) }
        let truncated = String(TLSFixtures.rootCertificate.dropLast(80)) + "\n-----END CERTIFICATE-----\n"
        #expect(throws: TLSError.self) { _ = try TLSTrustStore(pem: pem(truncated)) }
    }

    @Test("trust stores count their CAs; a custom CA adds to the bundle")
    func trustStoreCounts() throws {
        let store = try TLSTrustStore(pem: pem(TLSFixtures.rootCertificate + TLSFixtures.evilRootCertificate))
        #expect(store.count == 2)
        try store.add(pem(TLSFixtures.intermediateCertificate))
        #expect(store.count == 3)
    }

    @Test("the system CA bundle parses (as many CAs as it has PEM blocks, less those skipped)",
          .enabled(if: FileManager.default.fileExists(atPath: "/etc/ssl/certs/ca-certificates.crt")))
    func systemBundle() throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: "/etc/ssl/certs/ca-certificates.crt"))
        let blocks = String(decoding: data, as: UTF8.self).components(separatedBy: "-----BEGIN CERTIFICATE-----").count - 1
        let store = try TLSTrustStore(pem: Array(data))
        #expect(blocks > 50)
        #expect(store.count + store.skipped == blocks)
        #expect(store.skipped < 5)
        // And it does not trust our test CA.
        let client = try makeClient(trust: store)
        #expect(rejection(handshake(client, try goodServer())) == [.notTrusted])
    }

    @Test("pins: base64 of 32 bytes, nothing else")
    func pins() throws {
        let pin = try SPKIPin(base64: TLSFixtures.leafECPin)
        #expect(pin.sha256.count == 32)
        #expect(pin.description == TLSFixtures.leafECPin)
        for bad in ["", "abc", "Zm9v", String(TLSFixtures.leafECPin.dropLast()), TLSFixtures.leafECPin + "AAAA",
                    "!" + TLSFixtures.leafECPin.dropFirst(), "sha256//" + TLSFixtures.leafECPin] {
            #expect(throws: TLSError.invalidPin(bad)) { _ = try SPKIPin(base64: bad) }
        }
    }

    /// RFC 4648 §10 test vectors, plus non-canonical forms.
    @Test("base64 against RFC 4648 §10")
    func base64() {
        let vectors = [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="),
                       ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")]
        for (plain, encoded) in vectors {
            #expect(Base64.encode(Array(plain.utf8)) == encoded)
            #expect(Base64.decode(encoded) == Array(plain.utf8))
        }
        for bad in ["Zg=", "Zh==", "Zm9=v", "=Zm9", "Zg==Zg==", "Zm 9"] {
            #expect(Base64.decode(bad) == nil, "\(bad)")
        }
        // Against Foundation's encoder on seeded bytes.
        var rng = SeededRandom(seed: 3)
        for n in 0..<64 {
            let bytes = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            #expect(Base64.encode(bytes) == Data(bytes).base64EncodedString())
            #expect(Base64.decode(Data(bytes).base64EncodedString()) == bytes)
        }
    }

    @Test("verify flags decode to words")
    func flags() {
        #expect(CertificateProblem.decode(0x0C, pinMismatch: false) == [.notTrusted, .hostnameMismatch])
        #expect(CertificateProblem.decode(0x0100, pinMismatch: true) == [.pinMismatch])
        #expect(CertificateProblem.decode(0x0100, pinMismatch: false) == [.other(flags: 0x0100)])
        #expect(CertificateProblem.decode(0x1800 | 0x4000, pinMismatch: false) == [.badKeyUsage, .weakSignatureHash])
        #expect(CertificateProblem.decode(0x0201, pinMismatch: false) == [])
        #expect(CertificateProblem.decode(0x1000_0000, pinMismatch: false) == [.other(flags: 0x1000_0000)])
    }
}

@Suite struct UTCDateTests {
    @Test("days since 1970 agree with Foundation's Gregorian calendar")
    func againstFoundation() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "UTC"))
        var rng = SeededRandom(seed: 11)
        for _ in 0..<2000 {
            // 1600 … 2400, covering century and 400-year leap rules.
            let days = Int64(rng.next() % 292_000) - 135_000
            let date = Date(timeIntervalSince1970: TimeInterval(days * 86_400))
            let c = calendar.dateComponents([.year, .month, .day], from: date)
            let civil = civilDate(daysSinceEpoch: days)
            #expect(civil.year == Int64(c.year!) && civil.month == Int64(c.month!) && civil.day == Int64(c.day!))
            #expect(daysSinceEpoch(year: civil.year, month: civil.month, day: civil.day) == days)
        }
    }

    @Test("known dates")
    func known() {
        #expect(daysSinceEpoch(year: 1970, month: 1, day: 1) == 0)
        #expect(daysSinceEpoch(year: 2000, month: 2, day: 29) == 11_016)
        #expect(daysSinceEpoch(year: 2045, month: 1, day: 1) * 86_400 == TLSFixtures.leafECNotAfter)
        #expect(utcDate(TLSFixtures.expiredNotBefore) == "2020-01-01 00:00:00 UTC")
        #expect(utcDate(1_700_000_000) == "2023-11-14 22:13:20 UTC")
        #expect(utcDate(-1) == "1969-12-31 23:59:59 UTC")
    }
}

@Suite struct TLSWithHTTPTests {
    @Test("an HTTPS exchange: the HTTP codec's request through the client, the response parsed as it arrives")
    func httpsRoundTrip() throws {
        let server = try goodServer()
        let client = try makeClient()
        #expect(handshake(client, server) == [.connected])
        let url = try HTTPURL("https://signal.linnet.test/whip")
        let request = HTTPRequest(method: "POST", url: url, headers: HTTPHeaders([("Content-Type", "application/sdp")]),
                                  body: Array("v=0\r\n".utf8))
        try client.send(request.serialize())
        _ = exchange(client, server)
        let seen = String(decoding: server.received, as: UTF8.self)
        #expect(seen.hasPrefix("POST /whip HTTP/1.1\r\n") && seen.hasSuffix("\r\n\r\nv=0\r\n"))
        #expect(seen.contains("Host: signal.linnet.test\r\n"))

        let answer = String(repeating: "a=candidate:x\r\n", count: 2000)  // ~30 KB: several records
        try server.write(Array("HTTP/1.1 201 Created\r\nLocation: /whip/1\r\nContent-Length: \(answer.utf8.count)\r\n\r\n\(answer)".utf8))
        var parser = HTTPResponseParser()
        var response: HTTPResponse? = nil
        for event in exchange(client, server, chunk: 1000) {
            guard case .data(let bytes) = event, response == nil else { continue }
            response = try parser.feed(bytes)
        }
        let r = try #require(response)
        #expect(r.status == 201 && r.headers["location"] == "/whip/1" && r.bodyText == answer)
    }
}
