import Foundation
import Glibc

/// glibc's allocated-and-not-freed bytes over all arenas: what `mallinfo2().uordblks`
/// reports (its header, malloc.h, is not in Swift's Glibc module, so the same figure is
/// read from `malloc_info`'s totals: arena bytes from the system minus free chunks).
public func heapInUse() -> Int? {
    typealias MallocInfo = @convention(c) (Int32, UnsafeMutablePointer<FILE>?) -> Int32
    guard let symbol = dlsym(nil, "malloc_info") else { return nil }
    var buffer: UnsafeMutablePointer<CChar>? = nil
    var size = 0
    guard let file = open_memstream(&buffer, &size) else { return nil }
    _ = unsafeBitCast(symbol, to: MallocInfo.self)(0, file)
    fclose(file)
    guard let buffer else { return nil }
    defer { free(buffer) }
    let xml = String(cString: buffer)
    // The process-wide totals follow the last per-arena block.
    guard let tail = xml.components(separatedBy: "</heap>").last else { return nil }
    func value(_ type: String, _ kind: String) -> Int? {
        guard let r = tail.range(of: "<\(kind) type=\"\(type)\""),
              let s = tail[r.upperBound...].range(of: "size=\""),
              let e = tail[s.upperBound...].firstIndex(of: "\"") else { return nil }
        return Int(tail[s.upperBound..<e])
    }
    guard let system = value("current", "system"), let fast = value("fast", "total"), let rest = value("rest", "total") else { return nil }
    return system - fast - rest
}
