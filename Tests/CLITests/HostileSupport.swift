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

// Hostile networks, servers and files: what the tests in
// Hostile*Tests.swift share. Each of those reproduces a tester's finding against the
// binary or the code path it went through.

/// A child process with its standard output read line by line as it comes and its
/// standard error collected in a file. Every wait is on output or exit; the bounds
/// (`limit`) only end a broken test (a hang before the fix) instead of the suite.
final class Child {
    let process = Process()
    let out = Pipe()
    let errPath: String
    var buffer: [UInt8] = []
    var lines: [String] = []
    let exited = DispatchSemaphore(value: 0)

    init(_ arguments: [String], executable: String = Linnet.executable.path, environment: [String: String] = [:], name: String) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        process.environment = env
        process.standardOutput = out
        errPath = temporary("\(name).stderr")
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: errPath)
        process.standardInput = FileHandle.nullDevice
        process.terminationHandler = { [exited] _ in exited.signal() }
        try process.run()
    }

    deinit {
        if process.isRunning { process.terminate(); process.waitUntilExit() }
        unlink(errPath)
    }

    /// The next line of standard output, nil at its end (or once it was closed here).
    func nextLine() -> String? {
        while true {
            if let nl = buffer.firstIndex(of: 10) {
                let line = String(decoding: buffer[..<nl], as: UTF8.self)
                buffer.removeSubrange(...nl)
                lines.append(line)
                return line
            }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = read(out.fileHandleForReading.fileDescriptor, &chunk, chunk.count)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }

    func waitFor(_ match: (String) -> Bool) -> String? {
        while let line = nextLine() { if match(line) { return line } }
        return nil
    }

    /// Closes our end of its standard output: its next write gets EPIPE (SIGPIPE).
    func closeOutput() { try? out.fileHandleForReading.close() }

    func signal(_ s: Int32) { kill(process.processIdentifier, s) }

    /// Waits for exit (killing it after `limit`, which only a hang reaches); the exit
    /// status, or 128 + the signal that ended it, as a shell reports it.
    @discardableResult
    func wait(limit: TimeInterval = 60) -> Int32 {
        if exited.wait(timeout: .now() + limit) == .timedOut {
            process.interrupt()
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return -1
        }
        process.waitUntilExit()
        return process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
    }

    /// Drains what is left of standard output (after exit).
    func rest() -> [String] {
        var more: [String] = []
        while let l = nextLine() { more.append(l) }
        return more
    }

    var stderr: String { (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "" }
}

/// Runs linnet (or `executable`; behind `launcher`, e.g. setpriv, when one is given) to
/// its end, its standard output and error collected in files (so a chatty run never
/// blocks on a full pipe) and standard input empty. A run that has not ended within
/// `limit` seconds (a failure bound only: a hang) is killed: status -1, `timedOut`.
/// The status is the exit status, or 128 + the signal that ended it, as a shell says.
func runBounded(_ arguments: [String], environment: [String: String] = [:], executable: String = Linnet.executable.path,
                launcher: [String] = [], limit: TimeInterval = 30,
                name: String = "bounded") throws -> (status: Int32, out: String, err: String, timedOut: Bool) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: launcher.first ?? executable)
    p.arguments = launcher.isEmpty ? arguments : Array(launcher.dropFirst()) + [executable] + arguments
    p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let unique = "\(name)-\(UUID().uuidString)"
    let outPath = temporary("\(unique).out"), errPath = temporary("\(unique).err")
    _ = FileManager.default.createFile(atPath: outPath, contents: nil)
    _ = FileManager.default.createFile(atPath: errPath, contents: nil)
    defer { unlink(outPath); unlink(errPath) }
    p.standardOutput = FileHandle(forWritingAtPath: outPath)
    p.standardError = FileHandle(forWritingAtPath: errPath)
    p.standardInput = FileHandle.nullDevice
    let ended = DispatchSemaphore(value: 0)
    p.terminationHandler = { _ in ended.signal() }
    try p.run()
    var timedOut = false
    if ended.wait(timeout: .now() + limit) == .timedOut {
        timedOut = true
        kill(p.processIdentifier, SIGKILL)
        ended.wait()
    }
    let out = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
    let err = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
    let status = timedOut ? -1 : p.terminationReason == .uncaughtSignal ? 128 + p.terminationStatus : p.terminationStatus
    return (status, out, err, timedOut)
}

/// A FIFO (named pipe) nobody writes to: opening it for reading blocks forever.
func makeFIFO(_ name: String) -> String {
    let path = temporary(name)
    unlink(path)
    #expect(mkfifo(path, 0o600) == 0)
    return path
}

/// The RIFF data length a WAV header claims, and the bytes the file really holds after it.
func wavLengths(_ path: String) throws -> (header: Int, actual: Int) {
    let d = try Data(contentsOf: URL(fileURLWithPath: path))
    guard d.count >= 44 else { return (-1, d.count) }
    let h = Int(d[40]) | Int(d[41]) << 8 | Int(d[42]) << 16 | Int(d[43]) << 24
    return (h, d.count - 44)
}

func statusFileState(_ path: String) -> String? {
    guard let d = FileManager.default.contents(atPath: path),
          let o = (try? JSONSerialization.jsonObject(with: d)) as? [String: Any] else { return nil }
    return o["state"] as? String
}

/// Turns `loop` until `done()` (or 30 s, which only a broken test reaches).
func turnLoop(_ loop: EventLoop, until done: () -> Bool) {
    let limit = MonotonicClock.now() + .seconds(30)
    while !done() && MonotonicClock.now() < limit { try? loop.runOnce(maxWait: .milliseconds(100)) }
}
