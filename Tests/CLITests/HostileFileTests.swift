import Testing
import Foundation
import Glibc
import CSystem
import Platform
import Signaling
import Audio
import Devices
import Wire
@testable import linnet
@testable import Runtime

// Files a user names.

@Suite struct UserFileTests {
    @Test func tokenEndingInCRLFIsValid() throws {
        let path = temporary("token-crlf")
        defer { unlink(path) }
        try "abc.DEF-123\r\n".write(toFile: path, atomically: false, encoding: .utf8)
        chmod(path, 0o600)
        #expect(try RunCommand.readToken(path) == "abc.DEF-123")
        try "abc.DEF-123 \r\n\r\n".write(toFile: path, atomically: false, encoding: .utf8)
        #expect(try RunCommand.readToken(path) == "abc.DEF-123")
    }

    /// A FIFO named as token, config (flag or LINNET_CONFIG), CA file, send file or WAV
    /// input: a prompt error saying what it is, not a hang in open() with no output.
    /// Exit statuses as before (78 config, 65 data).
    @Test func fifosAreRefusedNotWaitedOn() throws {
        let fifo = makeFIFO("hostile.fifo")
        defer { unlink(fifo) }
        let base = ["run", "--whip", "http://127.0.0.1:9/whip", "--capture", "none", "--playback", "none", "--max-attempts", "1",
                    "--status-file", temporary("fifo-status.json")]
        let what = "'\(fifo)': a FIFO (named pipe), not a regular file"
        let cases: [([String], [String: String], Int32, String)] = [
            (base + ["--token-file", fifo], [:], 78, "cannot read the token file \(what)"),
            (base + ["--config", fifo], [:], 78, "cannot read the config file \(what)"),
            (base, ["LINNET_CONFIG": fifo], 78, "cannot read the config file \(what)"),
            (base + ["--ca-file", fifo], [:], 78, "cannot use the CA file \(fifo): a FIFO (named pipe), not a regular file"),
            (base + ["--send", fifo], [:], 65, "cannot read the send file \(what)"),
            (["run", "--whip", "http://127.0.0.1:9/whip", "--input", fifo, "--playback", "none"], [:], 65, what),
            (["audio", "--input", fifo, "--output", temporary("fifo-out.wav")], [:], 65, what),
        ]
        for (args, env, status, message) in cases {
            let r = try runBounded(args, environment: env, limit: 20, name: "fifo")
            #expect(r.status == status, "\(args) \(env): exit \(r.status) (-1: hung), \(r.err)")
            #expect(r.err.contains(message), "\(args): \(r.err)")
        }
    }

    @Test func unreadableConfigAndTokenSayWhyAndWhatToDo() throws {
        let dir = temporary("conf-dir")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let big = temporary("big.conf")
        try Data(repeating: 0x23, count: (1 << 20) + 1).write(to: URL(fileURLWithPath: big))
        defer { rmdir(dir); unlink(big) }
        let base = ["run", "--whip", "http://127.0.0.1:9/whip", "--capture", "none", "--playback", "none"]
        let d = try runBounded(base + ["--config", dir], limit: 20, name: "conf-dir")
        #expect(d.status == 78 && d.err.contains("cannot read the config file '\(dir)': a directory, not a regular file"), "\(d.err)")
        let b = try runBounded(base + ["--config", big], limit: 20, name: "conf-big")
        #expect(b.status == 78 && b.err.contains("cannot read the config file '\(big)': larger than 1 MiB"), "\(b.err)")
        let m = try runBounded(base + ["--token-file", "/nonexistent/token"], limit: 20, name: "token-missing")
        #expect(m.status == 78 && m.err.contains("cannot read the token file '/nonexistent/token': No such file or directory"), "\(m.err)")
    }

    /// A root-only token read by another user: strerror and the fix. Run as nobody
    /// through setpriv when the suite runs as root (root reads everything).
    @Test func rootOnlyTokenSaysUseSudo() throws {
        let token = temporary("root-token")
        try "secret\n".write(toFile: token, atomically: false, encoding: .utf8)
        defer { unlink(token) }
        chmod(token, 0o600)
        var args = ["run", "--whip", "http://127.0.0.1:9/whip", "--capture", "none", "--playback", "none", "--token-file", token]
        var executable = Linnet.executable.path
        if getuid() == 0 {
            // Root reads everything: read as nobody, if nobody can run the build at all.
            let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups"]
            guard FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"),
                  (try? runBounded(asNobody + [executable, "version"], executable: "/usr/bin/setpriv", name: "nobody"))?.status == 0 else { return }
            args = asNobody + [executable] + args
            executable = "/usr/bin/setpriv"
        } else {
            chmod(token, 0o000)
        }
        let r = try runBounded(args, executable: executable, limit: 20, name: "token-root")
        #expect(r.status == 78, "\(r.err)")
        let fix = getuid() == 0 ? "Permission denied (root only: use sudo, or make it readable by this user)" : "Permission denied (make it readable by this user)"
        #expect(r.err.contains("cannot read the token file '\(token)': \(fix)"), "\(r.err)")
    }

    /// A token others can read: one warning, as ssh gives for a private key; the run
    /// goes on (here to a refused connection and the one attempt allowed).
    @Test func tokenReadableByOthersIsWarnedAboutOnce() throws {
        let token = temporary("open-token")
        try "secret\n".write(toFile: token, atomically: false, encoding: .utf8)
        defer { unlink(token) }
        chmod(token, 0o644)
        let r = try runBounded(["run", "--whip", "http://127.0.0.1:9/whip", "--capture", "none", "--playback", "none", "--token-file", token,
                                "--max-attempts", "1", "--status-file", temporary("open-token-status.json")], limit: 30, name: "token-open")
        let warning = "the token file '\(token)' is readable by others (mode 0644); chmod 600 '\(token)'"
        #expect(r.err.components(separatedBy: warning).count == 2, "\(r.err)")
        #expect(r.status == 69, "\(r.err)")
    }
}

/// Outputs named in a directory others can write (`/tmp`): what another user planted
/// at the name (a symlink to a root-owned file, a file of theirs, a hard link) is never
/// written through, whoever runs Linnet; files and links of our own are written as
/// before. (Outside such directories, paths are used as given: `/dev/stdout`.)
@Suite struct PlantedOutputTests {
    /// A sticky, world-writable directory (as /tmp), a root-only file to protect, and a
    /// symlink to it owned by another user (`nobody`), as an attacker would plant it.
    func scene(_ name: String) throws -> (dir: String, secret: String, link: String) {
        let dir = temporary("planted-\(name)")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        chmod(dir, 0o1777)
        let secret = temporary("planted-\(name)-secret")
        try "root only\n".write(toFile: secret, atomically: false, encoding: .utf8)
        chmod(secret, 0o600)
        let link = dir + "/out"
        unlink(link)
        #expect(symlink(secret, link) == 0)
        #expect(lchown(link, 65_534, 65_534) == 0)
        return (dir, secret, link)
    }

    func cleanup(_ s: (dir: String, secret: String, link: String)) {
        unlink(s.link)
        unlink(s.secret)
        rmdir(s.dir)
    }

    @Test(arguments: ["events", "output", "audio-output", "sent"])
    func aPlantedSymlinkIsNotFollowed(_ option: String) throws {
        guard geteuid() == 0 else { return }  // planting another user's link needs root (CI is root)
        let s = try scene(option)
        defer { cleanup(s) }
        let input = temporary("planted-in-\(option).wav")
        defer { unlink(input) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16, samples: [Int32](repeating: 0, count: 4_800))
        let args: [String]
        switch option {
        case "events":
            args = ["run", "--whip", "http://127.0.0.1:9/whip", "--capture", "none", "--playback", "none", "--max-attempts", "1",
                    "--status-file", temporary("planted-status.json"), "--events", s.link]
        case "output":
            args = ["run", "--whip", "http://127.0.0.1:9/whip", "--input", input, "--max-attempts", "1",
                    "--status-file", temporary("planted-status.json"), "--output", s.link]
        case "audio-output":
            args = ["audio", "--input", input, "--output", s.link]
        default:
            args = ["audio", "--capture", "null", "--playback", "null", "--seconds", "1", "--sent", s.link]
        }
        let r = try runBounded(args, limit: 20, name: "planted")
        #expect(r.status != 0 && r.status != -1, "\(args): exit \(r.status), \(r.err)")
        #expect(r.err.contains("a symlink another user owns, in a directory others can write"), "\(option): \(r.err)")
        #expect(try String(contentsOfFile: s.secret, encoding: .utf8) == "root only\n", "\(option) wrote through the link")
    }

    @Test func aFileAnotherUserOwnsIsNotTruncatedButOurOwnIs() throws {
        guard geteuid() == 0 else { return }
        let s = try scene("file")
        defer { cleanup(s) }
        unlink(s.link)
        try "theirs\n".write(toFile: s.link, atomically: false, encoding: .utf8)
        #expect(chown(s.link, 65_534, 65_534) == 0)
        let input = temporary("planted-in2.wav")
        defer { unlink(input) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16, samples: [Int32](repeating: 0, count: 4_800))
        let r = try runBounded(["audio", "--input", input, "--output", s.link], limit: 20, name: "planted")
        #expect(r.status != 0 && r.err.contains("a file another user owns"), "\(r.err)")
        #expect(try String(contentsOfFile: s.link, encoding: .utf8) == "theirs\n")
        // Our own file, and our own symlink, are written as before.
        unlink(s.link)
        let mine = s.dir + "/mine.wav"
        defer { unlink(mine) }
        #expect(symlink(mine, s.link) == 0)
        let ok = try runBounded(["audio", "--input", input, "--output", s.link], limit: 20, name: "planted")
        #expect(ok.status == 0, "\(ok.err)")
        #expect(try WAVFile.read16(mine).samples.count == 4_800)
    }
}
