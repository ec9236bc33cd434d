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

        // Pure modules: no I/O, time comes in as an argument.
        .target(name: "Wire"),
        .target(name: "Codec", dependencies: ["COpus"]),
        .target(name: "SRTP", dependencies: ["CSRTP"]),
        .target(name: "DTLS", dependencies: ["Wire", "CMbedTLS"]),

        // IO modules.
        .target(name: "Platform", dependencies: ["Wire", "CSystem"]),
        .target(name: "Devices", dependencies: ["CALSA", "CGPIOD", "CSystem"]),

        // The executable: CLI and wiring only.
        .executableTarget(name: "linnet", dependencies: ["Wire", "Platform", "Codec", "SRTP", "DTLS", "Devices", "CSystem"],
                          linkerSettings: [.linkedLibrary("m")]),

        .testTarget(name: "WireTests", dependencies: ["Wire"]),
        .testTarget(name: "PlatformTests", dependencies: ["Platform", "Wire", "CSystem"]),
        .testTarget(name: "CLibraryTests", dependencies: ["Codec", "SRTP", "DTLS", "Devices", "Wire"]),
    ],
    swiftLanguageModes: [.v6]
)
