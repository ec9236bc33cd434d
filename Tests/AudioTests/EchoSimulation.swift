// The echo path simulation the echo-canceller tests and bench/LinnetBench (bench/build.sh
// compiles this file too) share: speech-like far-end and near-end signals, synthetic room
// responses, delay, gain, noise, clock drift, and the measures (ERLE, convergence time,
// near-end SNR). Pure Swift without Foundation, so the Embedded bench build takes it.
//
// Rooms: a direct path followed by a velvet-noise tail (sparse ±1 pulses, 1000 a second,
// under the exponential envelope of the RT60: −60 dB after RT60 seconds), the usual
// sparse model of late reverberation. The whole response is scaled to the echo-path
// gain (energy), so −6 dB means the echo carries a quarter of the far end's power.

/// A seeded generator (SplitMix64): the same signals on every run and machine.
struct SimRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    mutating func unit() -> Double { Double(next() >> 11) / 9_007_199_254_740_992 }
    /// Uniform in [−1, 1).
    mutating func symmetric() -> Double { unit() * 2 - 1 }
    /// Roughly Gaussian, unit variance (sum of four uniforms).
    mutating func gaussian() -> Double {
        (symmetric() + symmetric() + symmetric() + symmetric()) * 0.8660254
    }
}

func simExp(_ x: Double) -> Double {
    // exp by squaring of a short series: enough for envelopes (|x| ≤ 50).
    var y = x / 1024
    var s = 1 + y * (1 + y / 2 * (1 + y / 3 * (1 + y / 4)))
    for _ in 0..<10 { s *= s }
    y = s
    return y
}

func simCos(_ x: Double) -> Double {
    var a = x
    let twoPi = 6.283185307179586
    a -= twoPi * (a / twoPi).rounded(.down)
    if a > 3.141592653589793 { a -= twoPi }
    // Taylor to a^14 on [−π, π] (error < 1e-6).
    let a2 = a * a
    var term = 1.0, sum = 1.0
    var k = 1.0
    for _ in 0..<9 {
        term *= -a2 / (k * (k + 1))
        sum += term
        k += 2
    }
    return sum
}

func simSin(_ x: Double) -> Double { simCos(x - 1.5707963267948966) }

func simLog10(_ x: Double) -> Double {
    if x <= 0 { return -300 }
    // log2 by normalising to [1, 2), then a series for ln.
    var m = x
    var e = 0.0
    while m >= 2 { m /= 2; e += 1 }
    while m < 1 { m *= 2; e -= 1 }
    let t = (m - 1) / (m + 1)
    let t2 = t * t
    var term = t, sum = 0.0
    var k = 1.0
    for _ in 0..<20 {
        sum += term / k
        term *= t2
        k += 2
    }
    let ln = 2 * sum + e * 0.6931471805599453
    return ln / 2.302585092994046
}

func simDB(_ power: Double) -> Double { 10 * simLog10(power) }

/// Speech-like sound: syllables of 120–320 ms with gaps of 40–250 ms; each syllable is
/// voiced (a glottal pulse train at 100–220 Hz with a falling pitch, through two formant
/// resonators) or, one in five, unvoiced (noise through a high resonator), with a
/// raised-cosine envelope. Scaled to `rmsDBFS` over its active part.
func speechLike(seconds: Double, rate: Int, seed: UInt64, rmsDBFS: Double) -> [Double] {
    var rng = SimRandom(seed: seed)
    let n = Int(seconds * Double(rate))
    var out = [Double](repeating: 0, count: n)
    var i = Int(rng.unit() * 0.1 * Double(rate))
    let fs = Double(rate)
    while i < n {
        let length = Int((0.12 + 0.2 * rng.unit()) * fs)
        let voiced = rng.unit() > 0.2
        let f0 = 100 + 120 * rng.unit()
        let f1 = 300 + 500 * rng.unit(), f2 = 900 + 1300 * rng.unit(), f3 = 2500 + 1000 * rng.unit()
        // Two-pole resonators: y = x + 2r·cos θ·y₁ − r²·y₂.
        func coefficients(_ f: Double, _ bw: Double) -> (Double, Double) {
            let r = simExp(-3.141592653589793 * bw / fs)
            return (2 * r * simCos(6.283185307179586 * f / fs), r * r)
        }
        let (a1, b1) = coefficients(voiced ? f1 : f3, voiced ? 90 : 400)
        let (a2, b2) = coefficients(f2, 120)
        var y1 = 0.0, y2 = 0.0, z1 = 0.0, z2 = 0.0
        var phase = 0.0
        for k in 0..<length where i + k < n {
            let t = Double(k) / Double(length)
            let env = 0.5 - 0.5 * simCos(6.283185307179586 * t)
            var x: Double
            if voiced {
                let f = f0 * (1.1 - 0.2 * t)
                phase += f / fs
                x = 0
                if phase >= 1 { phase -= 1; x = 1 }
                x += 0.02 * rng.gaussian()
            } else {
                x = 0.3 * rng.gaussian()
            }
            let y = x + a1 * y1 - b1 * y2
            y2 = y1; y1 = y
            let z = y + a2 * z1 - b2 * z2
            z2 = z1; z1 = z
            out[i + k] = env * (voiced ? z : y)
        }
        i += length + Int((0.04 + 0.21 * rng.unit()) * fs)
    }
    var e = 0.0, active = 0
    for v in out where v != 0 { e += v * v; active += 1 }
    let rms = active > 0 ? (e / Double(active)).squareRoot() : 1
    // 0 dBFS = a full-scale square wave (RMS 32768).
    let target = 32768 * simExp(rmsDBFS / 20 * 2.302585092994046)
    for k in 0..<n { out[k] *= target / rms }
    return out
}

/// A room's echo path as sparse taps (sample offset, coefficient).
struct EchoPath {
    var offsets: [Int] = []
    var gains: [Double] = []

    /// - rt60: seconds; the tail runs until −60 dB.
    /// - delay: seconds before the direct path.
    /// - gainDB: the energy gain of the whole path.
    init(rt60: Double, delay: Double, gainDB: Double, rate: Int, seed: UInt64) {
        var rng = SimRandom(seed: seed)
        let fs = Double(rate)
        let d = Int(delay * fs)
        offsets.append(d)
        gains.append(1)
        // Early reflections then the diffuse tail, from 3 ms after the direct path.
        let end = Int(rt60 * fs)
        let spacing = fs / 1000
        var t = 0.003 * fs
        while Int(t) < end {
            let k = Int(t + spacing * rng.unit())
            let env = 0.7 * simExp(-6.907755 * Double(k) / (rt60 * fs))
            offsets.append(d + k)
            gains.append(rng.unit() < 0.5 ? -env : env)
            t += spacing
        }
        var e = 0.0
        for g in gains { e += g * g }
        let scale = simExp(gainDB / 20 * 2.302585092994046) / e.squareRoot()
        for k in 0..<gains.count { gains[k] *= scale }
    }

    /// The echo of `x`.
    func apply(_ x: [Double]) -> [Double] {
        var y = [Double](repeating: 0, count: x.count)
        x.withUnsafeBufferPointer { xp in
            y.withUnsafeMutableBufferPointer { yp in
                for t in 0..<offsets.count {
                    let o = offsets[t], g = gains[t]
                    if o >= xp.count { continue }
                    for n in o..<xp.count { yp[n] += g * xp[n - o] }
                }
            }
        }
        return y
    }
}

/// `x` as played by a clock `ppm` parts per million faster (positive) or slower than the
/// one it is measured against: x(n·(1 + ppm·10⁻⁶)) by Hann-windowed sinc interpolation
/// (16 taps a side).
func drifted(_ x: [Double], ppm: Double) -> [Double] {
    let ratio = 1 + ppm * 1e-6
    var y = [Double](repeating: 0, count: x.count)
    let half = 16
    for n in 0..<x.count {
        let t = Double(n) * ratio
        let base = Int(t.rounded(.down))
        let frac = t - Double(base)
        var s = 0.0
        for k in (-half + 1)...half {
            let j = base + k
            if j < 0 || j >= x.count { continue }
            let u = Double(k) - frac
            let sinc = u == 0 ? 1 : simSin(3.141592653589793 * u) / (3.141592653589793 * u)
            let w = 0.5 + 0.5 * simCos(3.141592653589793 * u / Double(half))
            s += x[j] * sinc * w
        }
        y[n] = s
    }
    return y
}

func whiteNoise(count: Int, rmsDBFS: Double, seed: UInt64) -> [Double] {
    var rng = SimRandom(seed: seed)
    let a = 32768 * simExp(rmsDBFS / 20 * 2.302585092994046)
    return (0..<count).map { _ in a * rng.gaussian() }
}

func toInt16(_ x: [Double]) -> [Int16] {
    x.map { Int16(max(-32768, min(32767, $0.rounded()))) }
}

func sumSquares(_ x: [Int16], _ range: Range<Int>) -> Double {
    var e = 0.0
    for i in range { let v = Double(x[i]); e += v * v }
    return e
}

/// 10·log10 of Σa² / Σ(a − b)² over `range`: b's SNR against a.
func snrDB(reference a: [Int16], _ b: [Int16], _ range: Range<Int>) -> Double {
    var s = 0.0, d = 0.0
    for i in range {
        let x = Double(a[i]), e = Double(b[i]) - x
        s += x * x; d += e * e
    }
    return simDB(s / max(d, 1e-9))
}

/// ERLE over `range`: what the microphone heard against what is left.
func erleDB(mic: [Int16], out: [Int16], _ range: Range<Int>) -> Double {
    simDB(sumSquares(mic, range) / max(sumSquares(out, range), 1e-9))
}

/// The first time (seconds after `start`) from which ERLE over a 500 ms window reaches
/// `targetDB`; nil if it never does before `end`. Windows where the echo is quieter than
/// 30 dB below its loudest window (pauses) are skipped.
func convergenceSeconds(mic: [Int16], out: [Int16], echo: [Int16], rate: Int, start: Int, end: Int, targetDB: Double) -> Double? {
    let w = rate / 2, hop = rate / 10
    var loudest = 0.0
    var i = start
    while i + w <= end { loudest = max(loudest, sumSquares(echo, i..<(i + w))); i += hop }
    i = start
    while i + w <= end {
        if sumSquares(echo, i..<(i + w)) > loudest / 1000 && erleDB(mic: mic, out: out, i..<(i + w)) >= targetDB {
            return Double(i + w - start) / Double(rate)
        }
        i += hop
    }
    return nil
}

/// One echo scenario: far-end speech from the start, near-end speech from `nearStart`
/// seconds, the echo of the far end through a room, noise at `noiseDBFS`.
struct EchoScenario {
    var rate = 16_000
    var seconds = 16.0
    var nearStart = 12.0
    var rt60 = 0.2
    var delay = 0.12
    var gainDB = -6.0
    var farDBFS = -20.0
    var nearDBFS = -26.0
    var noiseDBFS = -70.0
    var driftPPM = 0.0
    var seed: UInt64 = 1

    struct Signals {
        var reference: [Int16]
        /// What the microphone heard: echo + near end + noise.
        var mic: [Int16]
        /// The same without the echo.
        var micWithoutEcho: [Int16]
        var near: [Int16]
        var echo: [Int16]
    }

    func make() -> Signals {
        let far = speechLike(seconds: seconds, rate: rate, seed: seed &* 7 &+ 1, rmsDBFS: farDBFS)
        var near = speechLike(seconds: seconds - nearStart, rate: rate, seed: seed &* 7 &+ 2, rmsDBFS: nearDBFS)
        near = [Double](repeating: 0, count: Int(nearStart * Double(rate))) + near
        near += [Double](repeating: 0, count: max(0, far.count - near.count))
        near = Array(near[0..<far.count])
        let played = driftPPM == 0 ? far : drifted(far, ppm: driftPPM)
        let echo = EchoPath(rt60: rt60, delay: delay, gainDB: gainDB, rate: rate, seed: seed &* 7 &+ 3).apply(played)
        let noise = whiteNoise(count: far.count, rmsDBFS: noiseDBFS, seed: seed &* 7 &+ 4)
        var mic = [Double](repeating: 0, count: far.count)
        var clean = [Double](repeating: 0, count: far.count)
        for i in 0..<far.count {
            mic[i] = echo[i] + near[i] + noise[i]
            clean[i] = near[i] + noise[i]
        }
        return Signals(reference: toInt16(far), mic: toInt16(mic), micWithoutEcho: toInt16(clean),
                       near: toInt16(near), echo: toInt16(echo))
    }
}
