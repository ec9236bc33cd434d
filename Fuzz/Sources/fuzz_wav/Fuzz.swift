import FuzzSupport

// WAV headers (RIFF/WAVE) as `linnet run --input file.wav` reads them: WAV.parse on the
// first bytes of the file. Invariants:
// - the data offset lies within what was read;
// - the canonical header written for the parsed format parses back to it, data at 44.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    let format: WAVFormat
    do throws(WAVError) {
        format = try bytes.withBytes { (raw) throws(WAVError) in try WAV.parse(raw) }
    } catch { return 0 }
    invariant(format.dataOffset >= 12 && format.dataOffset <= bytes.count, "data offset \(format.dataOffset) outside \(bytes.count) bytes")
    invariant(format.bytesPerFrame > 0, "empty frames")
    let header = WAV.header(sampleRate: format.sampleRate, channels: format.channels, format: format.sampleFormat,
                            dataLength: format.dataLength)
    do throws(WAVError) {
        let again = try header.withBytes { (raw) throws(WAVError) in try WAV.parse(raw) }
        var expected = format
        expected.dataOffset = 44
        invariant(again == expected, "header round trip: \(format) → \(again)")
    } catch {
        invariant(false, "our own header does not parse: \(error)")
    }
    return 0
}
