/// A bounds-checked cursor over bytes the caller owns.
///
/// Network byte order (big-endian) unless a method says `LE`. The reader never outlives
/// the `withUnsafeBytes` closure that made its buffer (STYLE.md 9): create it inside one.
public struct ByteReader {
    public let bytes: UnsafeRawBufferPointer
    /// Offset of the next byte to read.
    @usableFromInline var _offset: Int
    @inlinable public var offset: Int { _offset }

    @inlinable
    public init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
        self._offset = 0
    }

    @inlinable public var remaining: Int { bytes.count &- offset }
    @inlinable public var isAtEnd: Bool { offset >= bytes.count }

    @inlinable
    func require(_ count: Int) throws(WireError) {
        guard count >= 0, count <= remaining else {
            throw .truncated(needed: count, available: remaining)
        }
    }

    @inlinable
    public mutating func readUInt8() throws(WireError) -> UInt8 {
        try require(1)
        let v = bytes[offset]
        _offset &+= 1
        return v
    }

    @inlinable
    public func peekUInt8() throws(WireError) -> UInt8 {
        try require(1)
        return bytes[offset]
    }

    @inlinable
    public mutating func readUInt16() throws(WireError) -> UInt16 {
        try require(2)
        let v = UInt16(bytes[offset]) << 8 | UInt16(bytes[offset &+ 1])
        _offset &+= 2
        return v
    }

    @inlinable
    public mutating func readUInt24() throws(WireError) -> UInt32 {
        try require(3)
        let v = UInt32(bytes[offset]) << 16 | UInt32(bytes[offset &+ 1]) << 8 | UInt32(bytes[offset &+ 2])
        _offset &+= 3
        return v
    }

    @inlinable
    public mutating func readUInt32() throws(WireError) -> UInt32 {
        try require(4)
        var v: UInt32 = 0
        for i in 0..<4 { v = v << 8 | UInt32(bytes[offset &+ i]) }
        _offset &+= 4
        return v
    }

    @inlinable
    public mutating func readUInt64() throws(WireError) -> UInt64 {
        try require(8)
        var v: UInt64 = 0
        for i in 0..<8 { v = v << 8 | UInt64(bytes[offset &+ i]) }
        _offset &+= 8
        return v
    }

    @inlinable
    public mutating func readUInt16LE() throws(WireError) -> UInt16 {
        try require(2)
        let v = UInt16(bytes[offset]) | UInt16(bytes[offset &+ 1]) << 8
        _offset &+= 2
        return v
    }

    @inlinable
    public mutating func readUInt32LE() throws(WireError) -> UInt32 {
        try require(4)
        var v: UInt32 = 0
        for i in (0..<4).reversed() { v = v << 8 | UInt32(bytes[offset &+ i]) }
        _offset &+= 4
        return v
    }

    /// The next `count` bytes as a view into the same memory (no copy).
    @inlinable
    public mutating func readBytes(_ count: Int) throws(WireError) -> UnsafeRawBufferPointer {
        try require(count)
        let slice = UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset &+ count)])
        _offset &+= count
        return slice
    }

    /// A reader over the next `count` bytes; this reader moves past them.
    @inlinable
    public mutating func subReader(_ count: Int) throws(WireError) -> ByteReader {
        ByteReader(try readBytes(count))
    }

    @inlinable
    public mutating func skip(_ count: Int) throws(WireError) {
        try require(count)
        _offset &+= count
    }

    /// Moves to an absolute offset within the buffer.
    @inlinable
    public mutating func seek(to newOffset: Int) throws(WireError) {
        guard newOffset >= 0, newOffset <= bytes.count else {
            throw .truncated(needed: newOffset, available: bytes.count)
        }
        _offset = newOffset
    }
}
