// swift-tools-version: 6.0
//
// Linnet's full-Swift build (`swift build`, `swift test`). The Embedded release build
// compiles the same Sources with scripts/embedded-build.sh; the module list and
// dependencies there must match the targets here.
import PackageDescription

/// A C library reached through a module map in Sources/<name>.
func cLibrary(_ name: String, pkgConfig: String? = nil, apt: String) -> Target {
    .systemLibrary(name: name, pkgConfig: pkgConfig, providers: [.apt([apt])])
}

let package = Package(
    name: "Linnet",
    products: [
        .executable(name: "linnet", targets: ["linnet"]),
        // For the fuzz package in Fuzz/ (a separate package, so libFuzzer's main never
        // meets `swift build`/`swift test` here): the modules that parse outside bytes.
        .library(name: "LinnetParsers",
                 targets: ["Wire", "JSON", "SDP", "ICE", "DTLS", "RTP", "SCTP", "Signaling", "Audio", "Settings", "Agent"]),
    ],
    targets: [
        // C libraries (module maps plus the thinnest shims).
        .systemLibrary(name: "CSystem"),
        cLibrary("CALSA", pkgConfig: "alsa", apt: "libasound2-dev"),
        cLibrary("COpus", pkgConfig: "opus", apt: "libopus-dev"),
        cLibrary("CSRTP", pkgConfig: "libsrtp2", apt: "libsrtp2-dev"),
        // mbedtls 2.28 has no pkg-config file: the module map links it by name.
        cLibrary("CMbedTLS", apt: "libmbedtls-dev"),
        cLibrary("CGPIOD", pkgConfig: "libgpiod", apt: "libgpiod-dev"),
        // Echo cancellation, noise suppression: speexdsp with Linnet's MDF tuning, which
        // scripts/build-speexdsp.sh builds (`make` does, and puts its pkg-config file on
        // PKG_CONFIG_PATH). The release build links the same library.
        .systemLibrary(name: "CSpeexDSP", pkgConfig: "linnet-speexdsp"),

        // Pure modules: no I/O, no clock; time comes in as an argument.
        .target(name: "Wire"),
        .target(name: "JSON", dependencies: ["Wire"]),
        .target(name: "SDP", dependencies: ["Wire"]),
        .target(name: "ICE", dependencies: ["Wire", "CMbedTLS"]),
        .target(name: "DTLS", dependencies: ["Wire", "CMbedTLS"]),
        .target(name: "SRTP", dependencies: ["Wire", "CSRTP"]),
        .target(name: "RTP", dependencies: ["Wire"]),
        .target(name: "SCTP", dependencies: ["Wire"]),
        .target(name: "Peer", dependencies: ["Wire", "SDP", "ICE", "DTLS", "SRTP", "RTP", "SCTP"]),
        .target(name: "Audio", dependencies: ["Wire", "CSpeexDSP"]),
        .target(name: "Codec", dependencies: ["COpus"]),
        // The wake word: TFLite Micro's audio frontend and an int8 runner for the
        // streaming microWakeWord models (issue 40).
        .target(name: "Wake"),
        .target(name: "Media", dependencies: ["Wire", "Codec", "RTP"]),
        // The DRBG is DTLS's (one class for TLS and DTLS).
        .target(name: "Signaling", dependencies: ["Wire", "JSON", "SDP", "DTLS", "CMbedTLS"]),
        // Every command's options, one table, and the typed Config filled from it.
        .target(name: "Settings", dependencies: ["Wire", "Audio", "Signaling", "ICE"]),
        .target(name: "Agent", dependencies: ["Wire", "Peer", "ICE", "DTLS", "SDP", "SCTP", "Signaling", "Audio", "Media", "JSON", "Settings"]),

        // IO modules: the only ones that touch the system (with the executable).
        .target(name: "Platform", dependencies: ["Wire", "CSystem"]),
        .target(name: "Devices", dependencies: ["Wire", "Audio", "Platform", "CALSA", "CGPIOD", "CSystem"]),
        // The one I/O shell around the agent core: HTTP over TCP/TLS, the UDP sockets,
        // the audio I/O, the board, the event log and the status file, the built-in
        // answerer.
        .target(name: "Runtime", dependencies: ["Wire", "JSON", "SDP", "ICE", "DTLS", "SRTP", "RTP", "SCTP", "Peer",
                                                "Audio", "Codec", "Media", "Signaling", "Settings", "Agent", "Platform", "Devices", "CSystem", "Wake"]),

        // The executable: CLI and wiring only.
        .executableTarget(name: "linnet",
                          dependencies: ["Wire", "JSON", "SDP", "ICE", "DTLS", "SRTP", "RTP", "SCTP", "Peer",
                                         "Audio", "Codec", "Media", "Signaling", "Settings", "Agent", "Platform", "Devices", "Runtime", "CSystem"],
                          linkerSettings: [.linkedLibrary("m")]),

        // One test target per module.
        .testTarget(name: "WireTests", dependencies: ["Wire"]),
        .testTarget(name: "PlatformTests", dependencies: ["Platform", "Wire", "CSystem"]),
        .testTarget(name: "CodecTests", dependencies: ["Codec", "Wire"]),
        .testTarget(name: "SRTPTests", dependencies: ["SRTP", "Wire", "CMbedTLS"]),
        .testTarget(name: "DTLSTests", dependencies: ["DTLS", "Wire", "CMbedTLS"]),
        .testTarget(name: "DevicesTests", dependencies: ["Devices", "Audio", "Platform", "Wire", "CAllocCounter"]),
        .testTarget(name: "CLITests", dependencies: ["linnet", "Runtime", "Settings"]),
        .testTarget(name: "SDPTests", dependencies: ["SDP", "Wire"], exclude: ["Fixtures"]),
        .testTarget(name: "ICETests", dependencies: ["ICE", "Wire", "Signaling"]),
        .testTarget(name: "SignalingTests", dependencies: ["Signaling", "Wire", "CMbedTLS"], exclude: ["Fixtures"]),
        // The in-memory network (seeded impairment, black holes, NAT) that the peer tests
        // and the agent-core tests share; test support only, never in a product.
        .target(name: "SimulatedNetwork", dependencies: ["Wire"], path: "Tests/SimulatedNetwork"),
        .testTarget(name: "SettingsTests", dependencies: ["Settings", "Wire", "Audio", "Signaling", "ICE"]),
        .testTarget(name: "AgentTests", dependencies: ["Agent", "Settings", "Wire", "JSON", "Signaling", "Peer", "ICE", "DTLS", "SDP", "SCTP",
                                                       "SimulatedNetwork"]),
        .testTarget(name: "PeerTests", dependencies: ["Peer", "SDP", "ICE", "DTLS", "SRTP", "RTP", "SCTP", "Codec", "Media", "Wire", "CAllocCounter",
                                                      "SimulatedNetwork"]),
        .testTarget(name: "JSONTests", dependencies: ["JSON", "Wire"]),
        .testTarget(name: "MediaTests", dependencies: ["Media", "RTP", "Codec", "Wire"]),
        .testTarget(name: "RTPTests", dependencies: ["RTP", "Wire"]),
        .target(name: "CAllocCounter", path: "Tests/CAllocCounter"),
        .testTarget(name: "AudioTests", dependencies: ["Audio", "Wire", "CAllocCounter"]),
        .testTarget(name: "SCTPTests", dependencies: ["SCTP", "Wire"]),
        .testTarget(name: "WakeTests", dependencies: ["Wake", "CAllocCounter"]),
    ],
    swiftLanguageModes: [.v6]
)
