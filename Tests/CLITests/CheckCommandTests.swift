import Testing
import Foundation
import Glibc
@testable import linnet
@testable import Runtime

// `linnet check` reads and sends the token as run does, names the file it
// read, reports 401/403 as such, and treats a missing push-to-talk line as run does.

@Suite(.serialized) struct CheckCommandTests {
    let quiet = ["--capture", "none", "--playback", "none"]

    /// The provider wants a token: check sends the one run would send, and a 401 is a
    /// failure that says so (78, "check the token"), never "ok".
    @Test func sendsTheTokenAndReports401() throws {
        let stub = try StubProvider("auth")
        let wrong = temporary("check-token-bad"), right = temporary("check-token-good")
        try "xq7-not-it\n".write(toFile: wrong, atomically: true, encoding: .utf8)
        try "right\n".write(toFile: right, atomically: true, encoding: .utf8)
        defer { unlink(wrong); unlink(right) }

        let bad = try runBounded(["check", "--whip", stub.url, "--token-file", wrong] + quiet)
        #expect(bad.status == 78, "\(bad.out)\(bad.err)")
        let line = checkLine(bad.out, "provider")
        #expect(line.hasPrefix("provider: FAILED") && line.contains("401 Unauthorized") && line.contains("check the token"), "\(line)")
        #expect(!bad.out.contains("xq7-not-it") && !bad.err.contains("xq7-not-it"), "the token never appears")

        let good = try runBounded(["check", "--whip", stub.url, "--token-file", right] + quiet)
        #expect(good.status == 0, "\(good.out)\(good.err)")
        #expect(checkLine(good.out, "provider").hasPrefix("provider: ok"), "\(good.out)")
        #expect(checkLine(good.out, "token").contains(right), "the token line names the file it read: \(good.out)")

        let none = try runBounded(["check", "--whip", stub.url] + quiet, environment: ["CREDENTIALS_DIRECTORY": "/nonexistent"])
        #expect(none.status == 78, "\(none.out)")
        #expect(checkLine(none.out, "provider").contains("no token was sent"), "\(none.out)")
    }

    /// systemd hands the token over as $CREDENTIALS_DIRECTORY/token: check says so.
    /// The wake model as run loads it: the packaged okay_nabu passes with its figures; a
    /// missing file, a .json that is not a model's settings, and bytes that are not a
    /// model each fail with what is wrong.
    @Test func wakeModelIsLoadedAsRunWould() throws {
        let stub = try StubProvider("ok")
        let root = DuplexRoomTests.root
        _ = try DuplexRoomTests.tool("/bin/bash", [root + "/scripts/fetch-wake-models.sh", root + "/build/third_party/wake"])
        let good = try runBounded(["check", "--whip", stub.url, "--wake-model", root + "/build/third_party/wake/okay_nabu.tflite"] + quiet)
        #expect(checkLine(good.out, "wake").contains("wakes when 5 inferences average over 85 %"), "\(good.out)")
        let dir = temporary("check-wake")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let missing = try runBounded(["check", "--whip", stub.url, "--wake-model", dir + "/none.tflite"] + quiet)
        #expect(missing.status != 0 && checkLine(missing.out, "wake").hasPrefix("wake: FAILED"), "\(missing.out)")
        try "not a model".write(toFile: dir + "/junk.tflite", atomically: true, encoding: .utf8)
        try #"{"micro": {"probability_cutoff": 0.9, "sliding_window_size": 5}}"#.write(toFile: dir + "/junk.json", atomically: true, encoding: .utf8)
        let junk = try runBounded(["check", "--whip", stub.url, "--wake-model", dir + "/junk.tflite"] + quiet)
        #expect(checkLine(junk.out, "wake").contains("not a TensorFlow Lite file"), "\(junk.out)")
        try #"{"micro": {"probability_cutoff": 7}}"#.write(toFile: dir + "/junk.json", atomically: true, encoding: .utf8)
        let settings = try runBounded(["check", "--whip", stub.url, "--wake-model", dir + "/junk.tflite"] + quiet)
        #expect(checkLine(settings.out, "wake").contains("not a microWakeWord model's settings"), "\(settings.out)")
    }

    @Test func credentialsDirectoryIsNamed() throws {
        let stub = try StubProvider("auth")
        let dir = temporary("check-credentials")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "right\n".write(toFile: dir + "/token", atomically: true, encoding: .utf8)
        let r = try runBounded(["check", "--whip", stub.url] + quiet, environment: ["CREDENTIALS_DIRECTORY": dir])
        #expect(r.status == 0, "\(r.out)\(r.err)")
        #expect(checkLine(r.out, "token").contains(dir + "/token"), "\(r.out)")
    }

    /// A token file only root can read, checked by another user: the line says what to
    /// do ("root only: use sudo") instead of a bare "cannot read".
    @Test func unreadableTokenSaysUseSudo() throws {
        let stub = try StubProvider("ok")
        let dir = temporary("check-rootonly")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        chmod(dir, 0o755)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let token = dir + "/token"
        try "secret\n".write(toFile: token, atomically: true, encoding: .utf8)
        chmod(token, 0o600)
        guard getuid() == 0 else { return }  // needs root to drop to another user
        let r = try runBounded(["check", "--whip", stub.url, "--token-file", token] + quiet,
                               launcher: ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        let line = checkLine(r.out, "token")
        #expect(line == "token: FAILED, cannot read \(token): Permission denied — root only: use sudo", "\(r.out)\(r.err)")
        #expect(r.status == 78)
    }

    /// A push-to-talk line that is missing is a warning, as in run (exit status
    /// unaffected), unless ptt-required.
    @Test func missingButtonIsAWarningUnlessRequired() throws {
        let stub = try StubProvider("ok")
        let optional = try runBounded(["check", "--whip", stub.url, "--ptt", "GPIO17"] + quiet)
        #expect(optional.status == 0, "\(optional.out)\(optional.err)")
        let line = checkLine(optional.out, "ptt")
        #expect(line.hasPrefix("ptt: WARNING") && line.contains("GPIO17") && line.contains("ptt-required"), "\(line)")
        let required = try runBounded(["check", "--whip", stub.url, "--ptt", "GPIO17", "--ptt-required"] + quiet)
        #expect(required.status == 69, "\(required.out)")
        #expect(checkLine(required.out, "ptt").hasPrefix("ptt: FAILED"), "\(required.out)")
    }

    /// The token file resolution run and check share: token-file, else
    /// $CREDENTIALS_DIRECTORY/token, else (outside systemd) /etc/linnet/token.
    @Test func tokenPathResolution() throws {
        let system = temporary("system-token")
        try "x\n".write(toFile: system, atomically: true, encoding: .utf8)
        defer { unlink(system) }
        typealias S = RunCommand.TokenSource
        #expect(RunCommand.tokenSource(tokenFile: "/a/b", credentialsDirectory: "/c", systemPath: system) == S(path: "/a/b", origin: .tokenFile))
        #expect(RunCommand.tokenSource(tokenFile: nil, credentialsDirectory: nil, systemPath: system) == S(path: system, origin: .system))
        #expect(RunCommand.tokenSource(tokenFile: nil, credentialsDirectory: nil, systemPath: "/nonexistent/token") == nil)
        // Under systemd the credential is the only source: no fallback to the file.
        #expect(RunCommand.tokenSource(tokenFile: nil, credentialsDirectory: "/nonexistent", systemPath: system) == nil)
        let dir = temporary("creds")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "y\n".write(toFile: dir + "/token", atomically: true, encoding: .utf8)
        #expect(RunCommand.tokenSource(tokenFile: nil, credentialsDirectory: dir, systemPath: system) == S(path: dir + "/token", origin: .credential))
    }
}

/// `check` with echo cancellation asked for, on devices with no sound card under them
/// (null): it claims no shared clock, and finds nothing wrong with aec itself. (The
/// same-card line needs a real card; this machine has none.)
@Suite struct CheckEchoTests {
    @Test func noCardNoClockLine() throws {
        let r = try Linnet.run(["check", "--whip", "http://127.0.0.1:9/whip", "--capture", "null", "--playback", "null", "--aec"])
        #expect(r.out.contains("capture: ok") && r.out.contains("playback: ok"), "\(r.out)")
        #expect(!r.out.contains("clock:") && !r.out.contains("aec"), "\(r.out)")
    }
}

/// `sudo linnet check` checks what the service will be able to do: after reading the
/// token (the service gets it from systemd as root reads it), it becomes the service's
/// user with the unit's groups. Shown with a microphone file only root may read: as
/// root it would open; as the service's user (here `nobody`, `--service-user`) it
/// cannot, and check says so.
@Suite struct CheckAsServiceUserTests {
    @Test func rootChecksAsTheServicesUser() throws {
        guard getuid() == 0, getpwnam("nobody") != nil else { return }
        let stub = try StubProvider("ok")
        let token = temporary("check-user-token"), mic = temporary("check-user-mic.wav")
        defer { unlink(token); unlink(mic) }
        try "secret\n".write(toFile: token, atomically: true, encoding: .utf8)
        chmod(token, 0o600)
        try WAVFile.write(mic, rate: 48_000, channels: 1, bits: 16, samples: [Int32](repeating: 0, count: 480))
        chmod(mic, 0o600)
        let r = try runBounded(["check", "--whip", stub.url, "--token-file", token, "--input", mic, "--playback", "none",
                                "--service-user", "nobody"])
        #expect(checkLine(r.out, "token").hasPrefix("token: ok"), "\(r.out)")
        #expect(checkLine(r.out, "user").hasPrefix("user: ok, the rest is checked as the service's user nobody"), "\(r.out)")
        #expect(checkLine(r.out, "input").contains("Permission denied"), "as the service's user the root-only file cannot be read: \(r.out)")
        // Without such a user: said, and checked as root.
        let none = try runBounded(["check", "--whip", stub.url, "--token-file", token, "--input", mic, "--playback", "none",
                                   "--service-user", "no-such-user-here"])
        #expect(checkLine(none.out, "user").hasPrefix("user: WARNING, no user no-such-user-here"), "\(none.out)")
        #expect(checkLine(none.out, "input").hasPrefix("input: ok"), "\(none.out)")
    }
}
