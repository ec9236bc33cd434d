import Testing
import Wire
@testable import Audio

@Suite struct WAVTests {
    /// fuzz_wav: a header for S24_LE (24-bit samples in 4-byte containers) said 32 bits
    /// per sample, so it read back as S32_LE: 24-bit audio played 48 dB too quietly.
    /// The fuzzer's input is below; the header written for what it parses to must parse
    /// back to the same format.
    @Test func s24InFourBytesRoundTrips() throws {
        // WAVE_FORMAT_EXTENSIBLE, 2 channels, 67,073 Hz, block align 8, 24 bits, sub-format
        // PCM; 768 bytes of data declared, none present.
        let input: [UInt8] = [
            0x52, 0x49, 0x46, 0x46, 0xfc, 0x03, 0x00, 0x00, 0x57, 0x41, 0x56, 0x45,
            0x66, 0x6d, 0x74, 0x20, 0x28, 0x00, 0x00, 0x00, 0xfe, 0xff, 0x02, 0x00,
            0x01, 0x06, 0x01, 0x00, 0x00, 0xca, 0x77, 0x00, 0x08, 0x00, 0x18, 0x00,
            0x27, 0x00, 0x43, 0x6c, 0x6f, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
            0x00, 0x80, 0x00, 0x00, 0x10, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71,
            0x64, 0x61, 0x74, 0x61, 0x00, 0x03, 0x00, 0x00,
        ]
        let parsed = try input.withBytes { (raw) throws(WAVError) in try WAV.parse(raw) }
        #expect(parsed == WAVFormat(sampleRate: 67_073, channels: 2, sampleFormat: .s24LE, dataOffset: 68, dataLength: 768))

        for format in [SampleFormat.s16LE, .s24_3LE, .s24LE, .s32LE] {
            let header = WAV.header(sampleRate: 48_000, channels: 2, format: format, dataLength: 960)
            // Bits per sample (offset 34) and block align (offset 32), read independently.
            let bits = Int(header[34]) | Int(header[35]) << 8
            let blockAlign = Int(header[32]) | Int(header[33]) << 8
            #expect(bits == (format == .s16LE ? 16 : format == .s32LE ? 32 : 24), "\(format)")
            #expect(blockAlign == 2 * format.bytesPerSample, "\(format)")
            let again = try header.withBytes { (raw) throws(WAVError) in try WAV.parse(raw) }
            #expect(again == WAVFormat(sampleRate: 48_000, channels: 2, sampleFormat: format, dataOffset: 44, dataLength: 960))
        }
    }
}
