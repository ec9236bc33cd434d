// Shared by the fuzz harnesses: the modules under test, an invariant check that crashes
// loudly (libFuzzer then saves the input as crash-<sha1>), and input splitting.
@_exported import Wire
@_exported import JSON
@_exported import SDP
@_exported import ICE
@_exported import DTLS
@_exported import RTP
@_exported import SCTP
@_exported import Signaling
@_exported import Audio
@_exported import Agent
@_exported import Settings

/// An invariant of the parser under test. A failure is a finding just like a trap:
/// print what broke and abort so libFuzzer records the input.
public func invariant(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String,
                      file: StaticString = #fileID, line: UInt = #line) {
    if !condition() {
        fatalError("invariant broken: \(message())", file: file, line: line)
    }
}

/// The input as an array (libFuzzer may pass a null pointer with size 0).
public func inputBytes(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    guard let data, size > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: size))
}

/// Reads an input as a sequence of pieces, so one input can stand for several datagrams
/// or several reads from a socket: each piece is a 2-byte big-endian length and that
/// many bytes (cut short at the end). The seeds use the same framing.
public struct Pieces: Sequence, IteratorProtocol {
    let bytes: [UInt8]
    var offset = 0

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public mutating func next() -> [UInt8]? {
        guard bytes.count - offset >= 2 else { return nil }
        let n = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
        offset += 2
        let end = Swift.min(offset + n, bytes.count)
        defer { offset = end }
        return Array(bytes[offset..<end])
    }
}

/// Splits `bytes` at the positions named by `cuts` (each taken modulo the length), for
/// feeding a streaming parser in arbitrary reads.
public func split(_ bytes: [UInt8], cuts: [UInt8]) -> [[UInt8]] {
    guard !bytes.isEmpty else { return [[]] }
    var points = Set(cuts.map { Int($0) % bytes.count }).sorted()
    if points.first == 0 { points.removeFirst() }
    var out: [[UInt8]] = []
    var start = 0
    for p in points { out.append(Array(bytes[start..<p])); start = p }
    out.append(Array(bytes[start...]))
    return out
}
