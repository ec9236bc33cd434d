// swift-tools-version: 6.0
//
// Linnet's fuzz targets: a separate package so that libFuzzer (which brings its own
// `main`) never touches the root package's `swift build` / `swift test`. Build and run
// them with scripts/fuzz.sh (which passes `-Xswiftc -sanitize=fuzzer,address`, so the
// root's modules are compiled with coverage instrumentation and ASan as well).
//
// One executable per parser. Each defines `LLVMFuzzerTestOneInput` and is compiled with
// `-parse-as-library` so that it has no `main` of its own. Seed inputs live in
// Fuzz/corpus/<target>/ (made by Fuzz/make-seeds.sh where they are not fixtures).
import Foundation
import PackageDescription

// SwiftPM names a path dependency after its directory, so the root package's identity
// is whatever the checkout is called (`linnet`, `main`, …).
let root = URL(fileURLWithPath: Context.packageDirectory).deletingLastPathComponent()

let targets: [(name: String, deps: [Target.Dependency])] = [
    ("fuzz_stun", ["FuzzSupport"]),
    ("fuzz_candidate", ["FuzzSupport"]),
    ("fuzz_sdp", ["FuzzSupport"]),
    ("fuzz_rtp", ["FuzzSupport"]),
    ("fuzz_rtcp", ["FuzzSupport"]),
    ("fuzz_sctp", ["FuzzSupport"]),
    ("fuzz_sctp_association", ["FuzzSupport"]),
    ("fuzz_dcep", ["FuzzSupport"]),
    ("fuzz_dtls", ["FuzzSupport"]),
    ("fuzz_clienthello", ["FuzzSupport"]),
    ("fuzz_routes", ["FuzzSupport"]),
    ("fuzz_json", ["FuzzSupport"]),
    ("fuzz_http_response", ["FuzzSupport"]),
    ("fuzz_http_request", ["FuzzSupport"]),
    ("fuzz_wav", ["FuzzSupport"]),
    ("fuzz_config", ["FuzzSupport"]),
    ("fuzz_turn_client", ["FuzzSupport"]),
    ("fuzz_turn_framing", ["FuzzSupport"]),
    ("fuzz_stream_budget", ["FuzzSupport"]),
]

let package = Package(
    name: "LinnetFuzz",
    dependencies: [.package(path: root.path)],
    targets: [
        .target(name: "FuzzSupport", dependencies: [.product(name: "LinnetParsers", package: root.lastPathComponent)]),
    ] + targets.map { t in
        .executableTarget(name: t.name, dependencies: t.deps,
                          swiftSettings: [.unsafeFlags(["-parse-as-library"])])
    },
    // The harnesses keep a little global state (a DTLS identity made once); Swift 5 mode
    // spares them Sendable ceremony. The code under test is compiled in its own (6) mode.
    swiftLanguageModes: [.v5]
)
