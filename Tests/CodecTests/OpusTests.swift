import Testing
import Foundation
import Wire
@testable import Codec

/// Goertzel power of `frequency` in `x` (a single DFT bin), for checking what came out of
/// the decoder without trusting the codec's own analysis.
func goertzelPower(_ x: ArraySlice<Int16>, frequency: Double, rate: Double) -> Double {
    let w = 2 * Double.pi * frequency / rate
    let coefficient = 2 * cos(w)
    var s1 = 0.0, s2 = 0.0
    for v in x {
        let s = Double(v) + coefficient * s1 - s2
        s2 = s1
        s1 = s
    }
    return s1 * s1 + s2 * s2 - coefficient * s1 * s2
}

func tone(_ frequency: Double, rate: Int, count: Int, amplitude: Double, start: Int = 0) -> [Int16] {
    (0..<count).map { Int16(amplitude * sin(2 * Double.pi * frequency * Double(start + $0) / Double(rate))) }
}

@Suite struct OpusTests {
    /// A 1 kHz tone through encode → decode at each pipeline rate and frame length: the
    /// decoded signal's energy sits at 1 kHz (≥ 30 dB above 1.5 kHz and 700 Hz).
    @Test(arguments: [(48_000, 10), (48_000, 20), (24_000, 20), (16_000, 10), (16_000, 20)])
    func toneSurvivesTheRoundTrip(rate: Int, frameMilliseconds: Int) throws {
        let frame = rate * frameMilliseconds / 1000
        let encoder = try OpusEncoder(sampleRate: Int32(rate), channels: 1)
        try encoder.setBitrate(24_000)
        let decoder = try OpusDecoder(sampleRate: Int32(rate), channels: 1)
        let input = tone(1000, rate: rate, count: rate, amplitude: 10_000)
        var output: [Int16] = []
        var packet = [UInt8](repeating: 0, count: 1275)
        var pcm = [Int16](repeating: 0, count: frame)
        for start in stride(from: 0, to: rate - frame + 1, by: frame) {
            let n = try Array(input[start..<(start + frame)]).withBuffer { (p: UnsafeBufferPointer<Int16>) throws(CodecError) in
                try packet.withMutableBytes { (out: UnsafeMutableRawBufferPointer) throws(CodecError) in try encoder.encode(p, into: out) }
            }
            #expect(n > 0 && n <= 1275)
            let m = try Array(packet[0..<n]).withBytes { (bytes: UnsafeRawBufferPointer) throws(CodecError) in
                try pcm.withMutableBuffer { (out: UnsafeMutableBufferPointer<Int16>) throws(CodecError) in try decoder.decode(bytes, into: out) }
            }
            #expect(m == frame)
            output += pcm
        }
        let steady = output[(rate / 5)...]
        let signal = goertzelPower(steady, frequency: 1000, rate: Double(rate))
        for other in [700.0, 1500.0] {
            let noise = goertzelPower(steady, frequency: other, rate: Double(rate))
            #expect(10 * log10(signal / max(noise, 1)) > 30, "\(other) Hz at \(rate) Hz / \(frameMilliseconds) ms")
        }
    }

    /// With a lost packet, concealment (nil packet) and FEC (the next packet's in-band
    /// redundancy) both produce a full frame, and FEC tracks the real signal more closely
    /// than plain concealment does.
    @Test func concealmentAndFEC() throws {
        let rate = 48_000, frame = 960
        let encoder = try OpusEncoder(sampleRate: Int32(rate), channels: 1)
        try encoder.setBitrate(32_000)
        try encoder.setFEC(true, expectedLossPercent: 20)
        let input = tone(440, rate: rate, count: rate, amplitude: 8000)
        var packets: [[UInt8]] = []
        var buffer = [UInt8](repeating: 0, count: 1275)
        for f in 0..<(rate / frame) {
            let n = try Array(input[(f * frame)..<((f + 1) * frame)]).withBuffer { (p: UnsafeBufferPointer<Int16>) throws(CodecError) in
                try buffer.withMutableBytes { (out: UnsafeMutableRawBufferPointer) throws(CodecError) in try encoder.encode(p, into: out) }
            }
            packets.append(Array(buffer[0..<n]))
        }
        func decodeAll(lose: Int, fec: Bool) throws -> [Int16] {
            let decoder = try OpusDecoder(sampleRate: Int32(rate), channels: 1)
            var out: [Int16] = []
            var pcm = [Int16](repeating: 0, count: frame)
            for (i, p) in packets.enumerated() {
                if i == lose {
                    if fec {
                        let next = packets[i + 1]
                        _ = try next.withBytes { (b: UnsafeRawBufferPointer) throws(CodecError) in
                            try pcm.withMutableBuffer { (o: UnsafeMutableBufferPointer<Int16>) throws(CodecError) in try decoder.decode(b, into: o, fec: true) }
                        }
                    } else {
                        _ = try pcm.withMutableBuffer { (o: UnsafeMutableBufferPointer<Int16>) throws(CodecError) in try decoder.decode(nil, into: o) }
                    }
                } else {
                    _ = try p.withBytes { (b: UnsafeRawBufferPointer) throws(CodecError) in
                        try pcm.withMutableBuffer { (o: UnsafeMutableBufferPointer<Int16>) throws(CodecError) in try decoder.decode(b, into: o) }
                    }
                }
                out += pcm
            }
            return out
        }
        let clean = try decodeAll(lose: -1, fec: false)
        let lost = 25
        let concealed = try decodeAll(lose: lost, fec: false)
        let recovered = try decodeAll(lose: lost, fec: true)
        func error(_ x: [Int16]) -> Double {
            var e = 0.0
            for i in (lost * frame)..<((lost + 1) * frame) { let d = Double(x[i]) - Double(clean[i]); e += d * d }
            return e
        }
        var energy = 0.0
        for i in (lost * frame)..<((lost + 1) * frame) { energy += Double(clean[i]) * Double(clean[i]) }
        #expect(error(recovered) < error(concealed))
        // FEC gets the lost frame back to within 10 dB of the clean decode.
        #expect(10 * log10(energy / max(error(recovered), 1)) > 10)
    }

    @Test func badArgumentsAreTypedErrors() throws {
        #expect(throws: CodecError.self) { try OpusEncoder(sampleRate: 44_100, channels: 1) }
        #expect(throws: CodecError.self) { try OpusDecoder(sampleRate: 48_000, channels: 3) }
        let encoder = try OpusEncoder(sampleRate: 48_000, channels: 1)
        #expect(throws: CodecError.self) { try encoder.setComplexity(11) }
        // 7 ms is not an Opus frame size.
        var packet = [UInt8](repeating: 0, count: 1275)
        let pcm = [Int16](repeating: 0, count: 336)
        #expect(throws: CodecError.self) {
            try pcm.withBuffer { (p: UnsafeBufferPointer<Int16>) throws(CodecError) in
                _ = try packet.withMutableBytes { (out: UnsafeMutableRawBufferPointer) throws(CodecError) in try encoder.encode(p, into: out) }
            }
        }
        // A corrupt packet is refused, not decoded into garbage or a crash.
        let decoder = try OpusDecoder(sampleRate: 48_000, channels: 1)
        var out = [Int16](repeating: 0, count: 960)
        let garbage: [UInt8] = [0xFF, 0xFF, 0xFF]
        #expect(throws: CodecError.self) {
            try garbage.withBytes { (b: UnsafeRawBufferPointer) throws(CodecError) in
                _ = try out.withMutableBuffer { (o: UnsafeMutableBufferPointer<Int16>) throws(CodecError) in try decoder.decode(b, into: o) }
            }
        }
    }
}
