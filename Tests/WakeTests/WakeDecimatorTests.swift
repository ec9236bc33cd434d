import Foundation
import Testing
@testable import Wake

/// The detector's 48 kHz → 16 kHz decimator against the frequency response it promises:
/// speech frequencies pass at unity gain, and what would fold back into the band the
/// features read is gone.
@Suite struct WakeDecimatorTests {
    /// The RMS gain (dB) of a sine at `hz` through the decimator, measured on the output
    /// after the filter has filled, fed in 10 ms frames as the listener does.
    func gain(_ hz: Double) -> Double {
        let d = WakeDecimator(maxInput: 480)
        let amplitude = 16_000.0
        var out: [Int16] = []
        var frame = [Int16](repeating: 0, count: 480)
        var step = [Int16](repeating: 0, count: 161)
        for f in 0..<100 {
            for i in 0..<480 { frame[i] = Int16((amplitude * sin(2 * .pi * hz * Double(f * 480 + i) / 48_000)).rounded()) }
            let n = frame.withUnsafeBufferPointer { a in step.withUnsafeMutableBufferPointer { d.process(a, into: $0) } }
            #expect(n == 160)
            out += step[0..<n]
        }
        let tail = out.dropFirst(800).map { Double($0) }
        let rms = (tail.map { $0 * $0 }.reduce(0, +) / Double(tail.count)).squareRoot()
        return 20 * log10(rms / (amplitude / 2.squareRoot()))
    }

    @Test func passesSpeechAndRemovesWhatWouldFoldBack() {
        for hz in [100.0, 1_000, 3_000, 6_000] {
            #expect(abs(gain(hz)) < 0.1, "\(hz) Hz")
        }
        // Images that would land in 0.5–7 kHz at 16 kHz.
        for hz in [9_000.0, 11_000, 15_000, 20_000, 23_000] {
            #expect(gain(hz) < -70, "\(hz) Hz: \(gain(hz)) dB")
        }
    }

    @Test func outputCountsAndHostileSizes() {
        let d = WakeDecimator(maxInput: 480)
        var out = [Int16](repeating: 0, count: 200)
        // Odd sizes: every third input sample makes one output, across calls.
        var total = 0
        for size in [1, 2, 479, 480, 7, 11] {
            let input = [Int16](repeating: 1000, count: size)
            total += input.withUnsafeBufferPointer { a in out.withUnsafeMutableBufferPointer { d.process(a, into: $0) } }
        }
        // Outputs fall on input samples 1, 4, 7, … (the first window is silence and
        // the first sample).
        #expect(total == (1 + 2 + 479 + 480 + 7 + 11 + 2) / 3)
        // More than maxInput is cut to maxInput, never written past `output`.
        let big = [Int16](repeating: 0, count: 5000)
        var small = [Int16](repeating: 0, count: 10)
        let n = big.withUnsafeBufferPointer { a in small.withUnsafeMutableBufferPointer { d.process(a, into: $0) } }
        #expect(n == 10)
    }
}
