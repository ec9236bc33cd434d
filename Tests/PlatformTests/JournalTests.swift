import Testing
import CSystem
import Wire
@testable import Platform

/// journald's native protocol (systemd.io, "Native Journal Protocol"), sent to a datagram
/// socket of the test's own in journald's place.
@Suite struct JournalTests {
    /// `KEY=value` lines; a value with a newline as the key, a newline, its 64-bit
    /// little-endian length, the value and a newline; a name journald would refuse
    /// (lowercase, a leading underscore: its trusted fields) is left out. The datagram
    /// arrives whole.
    @Test func anEntryArrivesFramedAsJournaldReadsIt() throws {
        let path = "/tmp/linnet-journal-\(getpid()).sock"
        unlink(path)
        let receiver = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(receiver); unlink(path) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in path.utf8.enumerated() { raw[i] = b }
        }
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(receiver, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        #expect(bound == 0)
        let journal = try #require(Journal(socketPath: path))
        #expect(journal.send([("MESSAGE", "session connected"), ("LINNET_REASON", "a\nb"), ("_PID", "1"), ("lower", "x")]))
        var buffer = [UInt8](repeating: 0, count: 512)
        let n = recv(receiver, &buffer, buffer.count, Int32(MSG_DONTWAIT))
        #expect(Array(buffer[0..<max(n, 0)]) == Array("MESSAGE=session connected\nLINNET_REASON\n".utf8) + [3, 0, 0, 0, 0, 0, 0, 0] + Array("a\nb\n".utf8))
        // No journald there: the caller is told, and writes the line to stderr instead.
        unlink(path)
        #expect(!journal.send([("MESSAGE", "x")]))
    }
}
