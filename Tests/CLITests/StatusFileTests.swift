import Testing
import Foundation
import Glibc
import Wire
import JSON
import Platform
@testable import Runtime

/// `--status-file` as root: `<path>.tmp` must not be opened with O_CREAT|O_TRUNC
/// (that follows a planted symlink) nor renamed over the path whatever it is
/// (`--status-file /dev/null` would replace the null device with a file).
@Suite(.serialized) struct StatusFileTests {
    /// A run that changes state (connecting, then failed) and ends at once.
    func run(_ status: String, name: String) throws -> (status: Int32, out: String, err: String, timedOut: Bool) {
        try runBounded(["run", "--whip", "http://127.0.0.1:9/whip", "--capture", "none", "--playback", "none",
                        "--max-attempts", "1", "--status-file", status], limit: 30, name: name)
    }

    func directory(_ name: String, mode: mode_t = 0o755) throws -> String {
        let dir = temporary(name)
        try? FileManager.default.removeItem(atPath: dir)
        #expect(mkdir(dir, mode) == 0)
        chmod(dir, mode)
        return dir
    }

    func isRegular(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFREG
    }

    @Test func writesJSONInAPlainDirectory() throws {
        let dir = try directory("status-plain")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        _ = try run(dir + "/status.json", name: "status-plain")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/status.json"))) as? [String: Any]
        #expect(json?["state"] as? String == "failed" || json?["state"] as? String == "closed")
        // Nothing left behind but the file itself.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["status.json"])
    }

    /// The state files' durable replacement (the day's usage, the open sessions): the
    /// same whole-file replacement, and the same refusals. That it is on the disk when
    /// it returns is shown where a disk can lose it: the virtual board's power cuts
    /// (board/vm, `powercut`), which found a usage count going back without it.
    @Test func aDurableReplacementIsWholeAndRefusesWhatTheOtherRefuses() throws {
        let dir = try directory("safefile-durable")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for text in ["{\"connected_ms\":1}\n", "{\"connected_ms\":219630}\n"] {
            try SafeFile.replace(dir + "/daily-usage.json", with: Array(text.utf8), durable: true)
            #expect(try String(contentsOfFile: dir + "/daily-usage.json", encoding: .utf8) == text)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["daily-usage.json"])
        #expect(mkfifo(dir + "/open-sessions.jsonl", 0o644) == 0)
        #expect(throws: SafeFile.Failure.self) { try SafeFile.replace(dir + "/open-sessions.jsonl", with: [10], durable: true) }
        #expect(!isRegular(dir + "/open-sessions.jsonl"))
    }

    /// The old temporary name, planted as a symlink to a file we must not touch.
    @Test func aPlantedSymlinkIsNotFollowed() throws {
        let dir = try directory("status-planted")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let victim = dir + "/passwd"
        try "root:x:0:0::/root:/bin/sh\n".write(toFile: victim, atomically: false, encoding: .utf8)
        #expect(symlink(victim, dir + "/status.json.tmp") == 0)
        _ = try run(dir + "/status.json", name: "status-planted")
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "root:x:0:0::/root:/bin/sh\n")
        #expect(isRegular(dir + "/status.json"))
    }

    /// A target that is a FIFO, a symlink or a device node is refused, said once, and
    /// left as it was; the run itself is unaffected.
    @Test func aTargetThatIsNotARegularFileIsLeftAlone() throws {
        let dir = try directory("status-targets")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(mkfifo(dir + "/fifo.json", 0o644) == 0)
        let victim = dir + "/victim"
        try "keep\n".write(toFile: victim, atomically: false, encoding: .utf8)
        #expect(symlink(victim, dir + "/link.json") == 0)
        var cases = [("fifo.json", "a FIFO"), ("link.json", "a symbolic link")]
        // A device node like /dev/null (major 1, minor 3: the old encoding), made here
        // rather than risking the real one.
        if mknod(dir + "/null", S_IFCHR | 0o666, dev_t(1 << 8 | 3)) == 0 { cases.append(("null", "a character device")) }
        for (name, kind) in cases {
            let r = try run(dir + "/" + name, name: "status-\(name)")
            #expect(r.status == 69, "\(name): \(r.err)")
            #expect(r.err.contains("exists and is not a regular file (\(kind)): not replacing it"), "\(name): \(r.err)")
            #expect(r.err.components(separatedBy: "status file:").count == 2, "said once: \(r.err)")
            #expect(!isRegular(dir + "/" + name), "\(name) was replaced by a file")
        }
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "keep\n")
    }

    /// A directory anyone may write to (without the sticky bit) could have anything
    /// swapped in: refused. /tmp-like sticky directories are fine.
    @Test func aDirectoryOthersControlIsRefused() throws {
        let open = try directory("status-open", mode: 0o777)
        defer { try? FileManager.default.removeItem(atPath: open) }
        let r = try run(open + "/status.json", name: "status-open")
        #expect(r.err.contains("is writable by others without the sticky bit"), "\(r.err)")
        #expect(!FileManager.default.fileExists(atPath: open + "/status.json"))
        let sticky = try directory("status-sticky", mode: 0o1777)
        defer { try? FileManager.default.removeItem(atPath: sticky) }
        _ = try run(sticky + "/status.json", name: "status-sticky")
        #expect(isRegular(sticky + "/status.json"))
    }
}

/// The events file outlives a restart (appended to; each run marked by a `start` line),
/// and is kept to a size: past it, FILE becomes FILE.1 and a new FILE begins.
@Suite struct EventFileTests {
    func lines(_ path: String) -> [[String: Any]] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    @Test func runsAppendAndAreMarked() throws {
        let path = temporary("events-runs.jsonl")
        defer { unlink(path) }
        for run in 0..<2 {
            let log = try EventLog(path: path, start: .zero)
            log.write("state", [("state", .string("connected")), ("run", JSONValue(run))], now: .zero)
        }
        let all = lines(path)
        #expect(all.map { $0["type"] as? String ?? "?" } == ["start", "state", "start", "state"], "\(all)")
        #expect(all.first?["pid"] as? Int == Int(getpid()))
    }

    @Test func aLongRunRotates() throws {
        let path = temporary("events-rotate.jsonl")
        defer { unlink(path); unlink(path + ".1") }
        let log = try EventLog(path: path, start: .zero, maxBytes: 2_000)
        for i in 0..<200 { log.write("stats", [("i", JSONValue(i))], now: .zero) }
        let current = lines(path), previous = lines(path + ".1")
        #expect(!previous.isEmpty && !current.isEmpty)
        let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? Int.max
        #expect(size < 2_100, "\(size) bytes")
        // Nothing lost across the cut: the last of FILE.1 is followed by the first of FILE.
        let lastBefore = previous.last?["i"] as? Int, firstAfter = current.first?["i"] as? Int
        #expect(lastBefore.map { $0 + 1 } == firstAfter, "\(String(describing: lastBefore)) then \(String(describing: firstAfter))")
        #expect(current.last?["i"] as? Int == 199)
    }
}
