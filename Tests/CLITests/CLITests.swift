import Testing
import Foundation

/// Runs the built `linnet` executable (the full-Swift one beside the test bundle) as a
/// user would, and checks its output and exit status against CLI.md.
struct Linnet {
    /// Under `scripts/sanitize.sh address`, the options the spawned `linnet` processes run
    /// with (`SANITIZER_CHILD_ASAN_OPTIONS`: leak checking on), put in this process's
    /// environment once, before the first spawn, so every child inherits them. This
    /// process's own ASan read its options at start and keeps them (leak checking off:
    /// a test process leaks fixtures by design; the product is what is checked).
    static let childSanitizerOptions: Void = {
        if let o = ProcessInfo.processInfo.environment["SANITIZER_CHILD_ASAN_OPTIONS"] { setenv("ASAN_OPTIONS", o, 1) }
    }()

    static var executable: URL {
        _ = childSanitizerOptions
        var dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: dir.appendingPathComponent("linnet").path), dir.path != "/" {
            dir = dir.deletingLastPathComponent()
        }
        return dir.appendingPathComponent("linnet")
    }

    static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, out: String, err: String) {
        let p = Process()
        p.executableURL = executable
        p.arguments = arguments
        if !environment.isEmpty {
            p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
    }
}

@Suite struct CLITests {
    @Test func version() throws {
        let r = try Linnet.run(["version"])
        #expect(r.status == 0)
        #expect(r.out.hasPrefix("linnet 0."))
        for library in ["opus", "alsa", "srtp", "mbedtls", "gpiod"] {
            #expect(r.out.contains("\n\(library) "), "\(library) missing from version")
        }
        #expect(try Linnet.run(["--version"]).out == r.out)
    }

    @Test func helpListsEveryCommandOfCLImd() throws {
        let r = try Linnet.run(["help"])
        #expect(r.status == 0)
        for command in ["run", "demo", "answer", "audio", "devices", "check", "selftest", "version", "help"] {
            #expect(r.out.contains("linnet \(command)"), "\(command)")
        }
        let one = try Linnet.run(["help", "selftest"])
        #expect(one.status == 0 && one.out.hasPrefix("usage: linnet selftest"))
    }

    @Test func usageErrorsExit64() throws {
        let unknown = try Linnet.run(["frobnicate"])
        #expect(unknown.status == 64)
        #expect(unknown.err.contains("unknown command 'frobnicate'"))
        #expect(try Linnet.run([]).status == 64)
        #expect(try Linnet.run(["help", "nope"]).status == 64)
    }

    @Test func selftestPasses() throws {
        let r = try Linnet.run(["selftest"])
        #expect(r.status == 0, "\(r.out)\(r.err)")
        #expect(r.out.contains("selftest: 7 passed, 0 failed"))
    }
}

@Suite struct DemoTests {
    /// The README's main command: a whole call on loopback with the built-in answerer.
    /// Audio goes both ways; what came back is the test voice (speech-band energy, not
    /// silence), and the events include the connection and the data-channel echo.
    @Test func demoCallGoesBothWays() throws {
        let output = temporary("demo.wav")
        defer { unlink(output) }
        let r = try Linnet.run(["demo", "--seconds", "2", "--output", output])
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.contains("demo: ok, audio went both ways"))
        #expect(r.out.contains("\"state\":\"connected\""))
        #expect(r.out.contains("demo.hello"))
        let (rate, back) = try WAVFile.read16(output)
        #expect(rate == 48_000)
        #expect(back.count >= 48_000 * 3 / 2)
        #expect(Signal.rms(back[24_000...]) > 200)
    }
}
