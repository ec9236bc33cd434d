import Foundation
import SDP
import Wire

/// Fixture files next to this source file (no SwiftPM resources, by design).
enum Fixtures {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    static func bytes(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: directory.appendingPathComponent(name)))
    }

    static func text(_ name: String) throws -> String {
        String(decoding: try bytes(name), as: UTF8.self)
    }

    static func parse(_ name: String) throws -> SessionDescription {
        try SessionDescription.parse(bytes: bytes(name))
    }
}

/// The fixed local description behind Fixtures/linnet-offer.sdp. The expected text of
/// that file was written by hand from PROTOCOLS.md, not produced by the builder.
let fixtureFingerprintBytes: [UInt8] = (0..<32).map { UInt8(($0 * 7 + 3) & 0xFF) }

func fixtureLocal() -> LocalDescription {
    LocalDescription(
        sessionID: 3_141_592_653_589_793_238,
        iceUfrag: "LnT4",
        icePwd: "pWd0123456789abcdefghij+/",
        fingerprints: [Fingerprint(algorithm: "sha-256", bytes: fixtureFingerprintBytes)],
        candidates: ["candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host",
                     "2 1 udp 1694498815 198.51.100.7 50000 typ srflx raddr 127.0.0.1 rport 50000"],
        audio: LocalAudio(ssrc: 0x1234_5678, cname: "linnet-cname", streamID: "linnet", trackID: "mic"))
}

/// Replaces LF with CRLF (fixtures written inline in tests use LF).
func crlf(_ s: String) -> String {
    s.split(separator: "\n", omittingEmptySubsequences: false).joined(separator: "\r\n")
}
