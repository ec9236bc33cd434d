/// Typed-throws forms of the `withUnsafe…` accessors. The standard library's are
/// `rethrows`, which widens a typed error to `any Error` — not allowed in Embedded Swift
/// and lossy in full Swift. These keep the caller's error type.
extension Array {
    @inlinable
    public func withBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let result: Result<R, E> = withUnsafeBytes { raw in Result { () throws(E) -> R in try body(raw) } }
        return try result.get()
    }

    @inlinable
    public mutating func withMutableBytes<R, E: Error>(_ body: (UnsafeMutableRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let result: Result<R, E> = withUnsafeMutableBytes { raw in Result { () throws(E) -> R in try body(raw) } }
        return try result.get()
    }

    @inlinable
    public func withBuffer<R, E: Error>(_ body: (UnsafeBufferPointer<Element>) throws(E) -> R) throws(E) -> R {
        let result: Result<R, E> = withUnsafeBufferPointer { p in Result { () throws(E) -> R in try body(p) } }
        return try result.get()
    }

    @inlinable
    public mutating func withMutableBuffer<R, E: Error>(_ body: (UnsafeMutableBufferPointer<Element>) throws(E) -> R) throws(E) -> R {
        let result: Result<R, E> = withUnsafeMutableBufferPointer { p in Result { () throws(E) -> R in try body(p) } }
        return try result.get()
    }
}
