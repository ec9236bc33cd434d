import Testing
@testable import Wire

@Suite struct ByteReaderTests {
    @Test func readsBigEndianFields() throws {
        let bytes: [UInt8] = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12]
        try bytes.withBytes { (raw: UnsafeRawBufferPointer) throws(WireError) in
            var r = ByteReader(raw)
            #expect(try r.readUInt8() == 0x01)
            #expect(try r.readUInt16() == 0x0203)
            #expect(try r.readUInt24() == 0x04_0506)
            #expect(try r.readUInt32() == 0x0708_090A)
            #expect(try r.readUInt64() == 0x0B0C_0D0E_0F10_1112)
            #expect(r.isAtEnd)
            #expect(r.remaining == 0)
        }
    }

    @Test func readsLittleEndianFields() throws {
        let bytes: [UInt8] = [0x34, 0x12, 0x78, 0x56, 0x34, 0x12]
        try bytes.withBytes { (raw: UnsafeRawBufferPointer) throws(WireError) in
            var r = ByteReader(raw)
            #expect(try r.readUInt16LE() == 0x1234)
            #expect(try r.readUInt32LE() == 0x1234_5678)
        }
    }

    /// Every read past the end fails with the exact shortfall and leaves the cursor where
    /// it was, for every field width and every truncation point.
    @Test func truncatedInputIsAnErrorNeverATrap() {
        let full: [UInt8] = Array(0..<16)
        for length in 0..<8 {
            let bytes = Array(full[0..<length])
            bytes.withUnsafeBytes { raw in
                let attempts: [(Int, (inout ByteReader) throws(WireError) -> Void)] = [
                    (1, { r throws(WireError) in _ = try r.readUInt8() }),
                    (2, { r throws(WireError) in _ = try r.readUInt16() }),
                    (3, { r throws(WireError) in _ = try r.readUInt24() }),
                    (4, { r throws(WireError) in _ = try r.readUInt32() }),
                    (8, { r throws(WireError) in _ = try r.readUInt64() }),
                    (2, { r throws(WireError) in _ = try r.readUInt16LE() }),
                    (4, { r throws(WireError) in _ = try r.readUInt32LE() }),
                    (5, { r throws(WireError) in _ = try r.readBytes(5) }),
                    (6, { r throws(WireError) in try r.skip(6) }),
                ]
                for (width, attempt) in attempts {
                    var r = ByteReader(raw)
                    if width <= length {
                        #expect(throws: Never.self) { try attempt(&r) }
                        #expect(r.offset == width)
                    } else {
                        #expect(throws: WireError.truncated(needed: width, available: length)) { try attempt(&r) }
                        #expect(r.offset == 0)
                    }
                }
            }
        }
    }

    @Test func negativeCountsAreRejected() {
        [UInt8](repeating: 0, count: 4).withUnsafeBytes { raw in
            var r = ByteReader(raw)
            #expect(throws: WireError.self) { try r.readBytes(-1) }
            #expect(throws: WireError.self) { try r.skip(-1) }
            #expect(throws: WireError.self) { try r.seek(to: 5) }
            #expect(throws: WireError.self) { try r.seek(to: -1) }
        }
    }

    @Test func subReaderIsBoundedToItsSlice() throws {
        let bytes: [UInt8] = [0x00, 0x02, 0xAA, 0xBB, 0xCC]
        try bytes.withBytes { (raw: UnsafeRawBufferPointer) throws(WireError) in
            var r = ByteReader(raw)
            let length = try r.readUInt16()
            var sub = try r.subReader(Int(length))
            #expect(try sub.readUInt16() == 0xAABB)
            #expect(throws: WireError.truncated(needed: 1, available: 0)) { try sub.readUInt8() }
            #expect(try r.readUInt8() == 0xCC)
        }
    }
}

@Suite struct ByteWriterTests {
    @Test func writesFieldsAndPatches() throws {
        var storage = [UInt8](repeating: 0xFF, count: 32)
        let written = try storage.withMutableBytes { (buf: UnsafeMutableRawBufferPointer) throws(WireError) -> [UInt8] in
            var w = ByteWriter(buf)
            try w.writeUInt8(0x01)
            try w.writeUInt16(0)            // a length patched below
            try w.writeUInt24(0x0A_0B0C)
            try w.writeUInt32(0xDEAD_BEEF)
            try w.writeUInt64(0x0102_0304_0506_0708)
            try w.writeUInt16LE(0x1234)
            try w.writeUInt32LE(0x1234_5678)
            try w.writeString("hi")
            try w.writeZeros(2)
            try w.patchUInt16(UInt16(w.count), at: 1)
            return Array(w.written)
        }
        #expect(written == [0x01, 0x00, 28, 0x0A, 0x0B, 0x0C, 0xDE, 0xAD, 0xBE, 0xEF,
                            1, 2, 3, 4, 5, 6, 7, 8, 0x34, 0x12, 0x78, 0x56, 0x34, 0x12,
                            UInt8(ascii: "h"), UInt8(ascii: "i"), 0, 0])
        // Bytes past the written count are untouched.
        #expect(storage[28...].allSatisfy { $0 == 0xFF })
    }

    @Test func fullBufferIsAnError() {
        var storage = [UInt8](repeating: 0, count: 3)
        storage.withUnsafeMutableBytes { buf in
            var w = ByteWriter(buf)
            #expect(throws: WireError.noSpace(needed: 4, available: 3)) { try w.writeUInt32(1) }
            #expect(w.count == 0)
            #expect(throws: Never.self) { try w.writeUInt16(1) }
            #expect(throws: WireError.noSpace(needed: 2, available: 1)) { try w.writeUInt16(1) }
            #expect(throws: WireError.invalidValue) { try w.writeUInt24(1 << 24) }
            #expect(throws: WireError.invalidValue) { try w.patchUInt16(1, at: 1) }
            #expect(throws: WireError.noSpace(needed: 2, available: 1)) { try w.writeBytes([1, 2]) }
        }
    }

    @Test func readerReadsWhatWriterWrote() throws {
        var rng = SeededRandom(seed: 7)
        for _ in 0..<200 {
            let a = UInt16.random(in: .min ... .max, using: &rng)
            let b = UInt32.random(in: .min ... .max, using: &rng)
            let c = UInt64.random(in: .min ... .max, using: &rng)
            var storage = [UInt8](repeating: 0, count: 14)
            try storage.withMutableBytes { (buf: UnsafeMutableRawBufferPointer) throws(WireError) in
                var w = ByteWriter(buf)
                try w.writeUInt16(a); try w.writeUInt32(b); try w.writeUInt64(c)
            }
            try storage.withBytes { (raw: UnsafeRawBufferPointer) throws(WireError) in
                var r = ByteReader(raw)
                #expect(try r.readUInt16() == a)
                #expect(try r.readUInt32() == b)
                #expect(try r.readUInt64() == c)
            }
        }
    }
}
