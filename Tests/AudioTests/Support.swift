import Foundation
import Testing
import Wire
@testable import Audio

/// A 10 ms frame's metadata at `rate`/`channels` with sequence `seq`.
func frameInfo(_ rate: SampleRate = .hz48000, channels: Int = 1, seq: UInt64 = 0) -> FrameInfo {
    FrameInfo(format: try! AudioFormat(sampleRate: rate, channels: channels), sequence: seq,
              captureTime: Instant(nanoseconds: Int64(seq) * 10_000_000))
}

/// Runs `hook` over `input` in 10 ms frames and returns the output and the verdicts.
func run(_ hook: some AudioHook, _ input: [Int16], rate: SampleRate = .hz48000, channels: Int = 1) -> ([Int16], [HookVerdict]) {
    let n = rate.samplesPerFrame * channels
    var out: [Int16] = []
    var verdicts: [HookVerdict] = []
    hook.captureDidStart(try! AudioFormat(sampleRate: rate, channels: channels))
    var frame = [Int16](repeating: 0, count: n)
    var seq: UInt64 = 0
    var i = 0
    while i + n <= input.count {
        for j in 0..<n { frame[j] = input[i + j] }
        let info = frameInfo(rate, channels: channels, seq: seq)
        let v = frame.withUnsafeMutableBufferPointer { hook.process($0, info) }
        verdicts.append(v)
        out.append(contentsOf: frame)
        i += n
        seq += 1
    }
    hook.captureDidStop(try! AudioFormat(sampleRate: rate, channels: channels))
    return (out, verdicts)
}

/// A sine of `amplitude` (sample units) at `frequency` Hz, `count` samples at `rate`.
func sine(_ frequency: Double, amplitude: Double, rate: Double, count: Int, phase: Double = 0) -> [Double] {
    (0..<count).map { amplitude * sin(2 * Double.pi * frequency * Double($0) / rate + phase) }
}

func quantise(_ x: [Double]) -> [Int16] { x.map { Int16(max(-32768, min(32767, $0.rounded()))) } }

func maxAbsDiff(_ a: [Int16], _ b: [Int16]) -> Int {
    zip(a, b).map { abs(Int($0) - Int($1)) }.max() ?? 0
}

func rmsDB(_ x: ArraySlice<Int16>) -> Double {
    let ms = x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(x.count)
    return 10 * log10(ms / 1073741824)
}

/// Seeded white noise in ±amplitude.
func noise(_ count: Int, amplitude: Int, seed: UInt64) -> [Int16] {
    var rng = SeededRandom(seed: seed)
    return (0..<count).map { _ in Int16(Int.random(in: -amplitude...amplitude, using: &rng)) }
}

/// Least-squares fit of a·sin + b·cos (+ c) at a known frequency: amplitude and the
/// SNR of the fit (signal power over residual power) in dB.
func fitTone(_ y: [Double], frequency: Double, rate: Double) -> (amplitude: Double, snrDB: Double) {
    // Normal equations for [sin, cos, 1].
    var m = [[Double]](repeating: [0, 0, 0], count: 3)
    var v = [0.0, 0.0, 0.0]
    for (i, yi) in y.enumerated() {
        let w = 2 * Double.pi * frequency * Double(i) / rate
        let basis = [sin(w), cos(w), 1.0]
        for r in 0..<3 {
            v[r] += basis[r] * yi
            for c in 0..<3 { m[r][c] += basis[r] * basis[c] }
        }
    }
    // Gaussian elimination.
    for p in 0..<3 {
        for r in (p + 1)..<3 {
            let f = m[r][p] / m[p][p]
            for c in p..<3 { m[r][c] -= f * m[p][c] }
            v[r] -= f * v[p]
        }
    }
    var x = [0.0, 0.0, 0.0]
    for r in stride(from: 2, through: 0, by: -1) {
        var s = v[r]
        for c in (r + 1)..<3 { s -= m[r][c] * x[c] }
        x[r] = s / m[r][r]
    }
    var residual = 0.0
    for (i, yi) in y.enumerated() {
        let w = 2 * Double.pi * frequency * Double(i) / rate
        let e = yi - (x[0] * sin(w) + x[1] * cos(w) + x[2])
        residual += e * e
    }
    let amplitude = (x[0] * x[0] + x[1] * x[1]).squareRoot()
    let signal = amplitude * amplitude / 2 * Double(y.count)
    return (amplitude, 10 * log10(signal / max(residual, 1e-30)))
}

/// Frequency from positive-going zero crossings (linear interpolation between samples).
func measuredFrequency(_ y: [Double], rate: Double) -> Double {
    var crossings: [Double] = []
    for i in 1..<y.count where y[i - 1] < 0 && y[i] >= 0 {
        crossings.append(Double(i - 1) + (-y[i - 1]) / (y[i] - y[i - 1]))
    }
    guard crossings.count >= 2 else { return 0 }
    return Double(crossings.count - 1) / (crossings.last! - crossings.first!) * rate
}

/// Shares an unsafe pointer with a test thread.
struct SendablePointer<T>: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<T>
}

/// Runs `body` on a new Foundation thread; `join()` waits for it (spinning, no sleep).
final class TestThread: @unchecked Sendable {
    private let done = NSCondition()
    private var finished = false
    init(_ body: @escaping @Sendable () -> Void) {
        let t = Thread { [self] in
            body()
            done.lock(); finished = true; done.signal(); done.unlock()
        }
        t.stackSize = 1 << 20
        t.start()
    }
    func join() {
        done.lock()
        while !finished { done.wait() }
        done.unlock()
    }
}
