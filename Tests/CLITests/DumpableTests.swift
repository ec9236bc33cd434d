import Testing
import Foundation
import Glibc

/// Once `run` holds the token it is not dumpable, so another process of
/// the same user (or a core dump) cannot read its memory. The external fact: for a
/// non-dumpable process the kernel makes /proc/<pid>/environ (like mem) root's, so the
/// same unprivileged user can no longer read it.
@Suite struct DumpableTests {
    @Test func runHoldingATokenIsNotReadableThroughProc() throws {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else { return }
        let nobody = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        let token = temporary("dumpable-token")
        try "dumpable-token-0123456789".write(toFile: token, atomically: false, encoding: .utf8)
        chown(token, 65534, 65534)
        chmod(token, 0o600)
        defer { unlink(token) }
        let agent = try LineProcess(nobody[0], Array(nobody.dropFirst()) + [Linnet.executable.path, "run", "--whip", "http://127.0.0.1:9/whip",
                                    "--token-file", token, "--capture", "none", "--playback", "none", "--seconds", "20", "--events", "-"],
                                    stderr: temporary("dumpable.log"))
        defer { agent.process.terminate(); agent.process.waitUntilExit() }
        // The first state line: the token has been read by then.
        #expect(agent.waitFor { $0.contains("\"state\"") } != nil)
        let reader = Process()
        reader.executableURL = URL(fileURLWithPath: nobody[0])
        reader.arguments = Array(nobody.dropFirst()) + ["/bin/cat", "/proc/\(agent.process.processIdentifier)/environ"]
        reader.standardOutput = FileHandle.nullDevice
        let err = Pipe()
        reader.standardError = err
        try reader.run()
        let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        reader.waitUntilExit()
        #expect(reader.terminationStatus != 0, "the same user could read the agent's /proc/<pid>/environ")
        #expect(text.contains("Permission denied"), "\(text)")
    }
}
