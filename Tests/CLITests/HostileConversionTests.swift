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

// Float to integer conversions a user reaches.

@Suite struct ShortAndSilentAudioTests {
    /// `linnet audio` on input shorter than one 10 ms frame, on input that ends in
    /// digital silence and on silence alone: exit 0 with a summary (before: SIGILL,
    /// exit 132, converting the meter's −∞ dBFS to Int).
    @Test func audioSurvivesShortAndSilentInput() throws {
        let short = temporary("short.wav"), tail = temporary("silent-tail.wav"), silent = temporary("silent.wav"), out = temporary("short-out.wav")
        defer { for p in [short, tail, silent, out] { unlink(p) } }
        let tone = Signal.tone(440, amplitude: 0.25, seconds: 0.5, rate: 48_000).map { Int32($0 * 32_767) }
        try WAVFile.write(short, rate: 48_000, channels: 1, bits: 16, samples: Array(tone[0..<240]))
        try WAVFile.write(tail, rate: 48_000, channels: 1, bits: 16, samples: tone + [Int32](repeating: 0, count: 9_600))
        try WAVFile.write(silent, rate: 48_000, channels: 1, bits: 16, samples: [Int32](repeating: 0, count: 48_000))
        let s = try runBounded(["audio", "--input", short, "--output", out], name: "short")
        #expect(s.status == 0, "\(s.err)")
        #expect(s.out.contains("0 Opus packets") && s.out.contains("no whole 10 ms frame to measure"), "\(s.out)")
        for input in [tail, silent] {
            let r = try runBounded(["audio", "--input", input, "--output", out], name: "silent")
            #expect(r.status == 0, "\(r.err)")
            #expect(r.out.contains("last frame digital silence (peak −∞ dBFS)"), "\(r.out)")
        }
    }

    @Test func saturatingConversions() {
        #expect(Int(saturating: -Double.infinity) == Int.min)
        #expect(Int(saturating: Double.infinity) == Int.max)
        #expect(Int(saturating: Double.nan) == 0)
        #expect(Int64(saturating: 9.3e18) == Int64.max)
        #expect(Int64(saturating: 9_223_372_036_854_775_807.0) == Int64.max)
        #expect(Int16(saturating: -40_000) == Int16.min)
        #expect(Int32(saturating: -2.9) == -2)
        #expect(UInt8(saturating: -1) == 0)
    }
}
