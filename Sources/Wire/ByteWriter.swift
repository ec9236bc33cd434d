/// A bounds-checked writer into a buffer the caller owns and sized (STYLE.md 9:
/// callers own buffers; APIs write into a destination and return a count).
///
/// Network byte order unless a method says `LE`. `count` is the number of bytes written.
public struct ByteWriter {
    public let buffer: UnsafeMutableRawBufferPointer
    @usableFromInline var _count: Int
    @inlinable public var count: Int { _count }

    @inlinable
    public init(_ buffer: UnsafeMutableRawBufferPointer) {
        self.buffer = buffer
        self._count = 0
    }

    @inlinable public var free: Int { buffer.count &- count }

    /// The bytes written so far.
    @inlinable public var written: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: buffer[0..<count])
    }

    @inlinable
    func require(_ n: Int) throws(WireError) {
        guard n >= 0, n <= free else { throw .noSpace(needed: n, available: free) }
    }

    @inlinable
    public mutating func writeUInt8(_ v: UInt8) throws(WireError) {
        try require(1)
        buffer[count] = v
        _count &+= 1
    }

    @inlinable
    public mutating func writeUInt16(_ v: UInt16) throws(WireError) {
        try require(2)
        buffer[count] = UInt8(truncatingIfNeeded: v >> 8)
        buffer[count &+ 1] = UInt8(truncatingIfNeeded: v)
        _count &+= 2
    }

    @inlinable
    public mutating func writeUInt24(_ v: UInt32) throws(WireError) {
        guard v < 1 << 24 else { throw .invalidValue }
        try require(3)
        buffer[count] = UInt8(truncatingIfNeeded: v >> 16)
        buffer[count &+ 1] = UInt8(truncatingIfNeeded: v >> 8)
        buffer[count &+ 2] = UInt8(truncatingIfNeeded: v)
        _count &+= 3
    }

    @inlinable
    public mutating func writeUInt32(_ v: UInt32) throws(WireError) {
        try require(4)
        for i in 0..<4 { buffer[count &+ i] = UInt8(truncatingIfNeeded: v >> UInt32(24 &- 8 &* i)) }
        _count &+= 4
    }

    @inlinable
    public mutating func writeUInt64(_ v: UInt64) throws(WireError) {
        try require(8)
        for i in 0..<8 { buffer[count &+ i] = UInt8(truncatingIfNeeded: v >> UInt64(56 &- 8 &* i)) }
        _count &+= 8
    }

    @inlinable
    public mutating func writeUInt16LE(_ v: UInt16) throws(WireError) {
        try require(2)
        buffer[count] = UInt8(truncatingIfNeeded: v)
        buffer[count &+ 1] = UInt8(truncatingIfNeeded: v >> 8)
        _count &+= 2
    }

    @inlinable
    public mutating func writeUInt32LE(_ v: UInt32) throws(WireError) {
        try require(4)
        for i in 0..<4 { buffer[count &+ i] = UInt8(truncatingIfNeeded: v >> UInt32(8 &* i)) }
        _count &+= 4
    }

    @inlinable
    public mutating func writeBytes(_ bytes: UnsafeRawBufferPointer) throws(WireError) {
        try require(bytes.count)
        if let base = bytes.baseAddress, let dst = buffer.baseAddress {
            (dst + count).copyMemory(from: base, byteCount: bytes.count)
        }
        _count &+= bytes.count
    }

    @inlinable
    public mutating func writeBytes(_ bytes: [UInt8]) throws(WireError) {
        try require(bytes.count)
        for b in bytes {
            buffer[count] = b
            _count &+= 1
        }
    }

    /// Writes the UTF-8 bytes of a string.
    @inlinable
    public mutating func writeString(_ s: String) throws(WireError) {
        try require(s.utf8.count)
        for b in s.utf8 {
            buffer[count] = b
            _count &+= 1
        }
    }

    @inlinable
    public mutating func writeZeros(_ n: Int) throws(WireError) {
        try require(n)
        for i in 0..<n { buffer[count &+ i] = 0 }
        _count &+= n
    }

    /// Overwrites a 16-bit field already written (a length that is known only later).
    @inlinable
    public mutating func patchUInt16(_ v: UInt16, at offset: Int) throws(WireError) {
        guard offset >= 0, offset &+ 2 <= count else { throw .invalidValue }
        buffer[offset] = UInt8(truncatingIfNeeded: v >> 8)
        buffer[offset &+ 1] = UInt8(truncatingIfNeeded: v)
    }

    /// Overwrites a 32-bit field already written.
    @inlinable
    public mutating func patchUInt32(_ v: UInt32, at offset: Int) throws(WireError) {
        guard offset >= 0, offset &+ 4 <= count else { throw .invalidValue }
        for i in 0..<4 { buffer[offset &+ i] = UInt8(truncatingIfNeeded: v >> UInt32(24 &- 8 &* i)) }
    }
}
