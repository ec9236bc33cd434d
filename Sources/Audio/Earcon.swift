/// The chime played when the wake word is heard: two short notes rising a fifth (E6 then
/// B6), each with a raised-cosine attack and release so neither clicks, at -14 dBFS
/// peak: heard over a quiet room, below the assistant's voice. Played locally, never
/// sent (the microphone opens once it has played: `WakeTurn`).
public enum Earcon {
    /// How long it plays.
    public static let milliseconds = 150

    /// The chime at `rate` Hz, mono. Made once at start-up (it allocates).
    public static func samples(rate: Int) -> [Int16] {
        let notes: [(hz: Double, ms: Int)] = [(1318.5, 70), (1975.5, 80)]
        let peak = 6554.0 // -14 dBFS
        var out: [Int16] = []
        out.reserveCapacity(rate * milliseconds / 1000)
        for note in notes {
            let n = rate * note.ms / 1000
            let ramp = rate * 8 / 1000 // 8 ms
            for i in 0..<n {
                var gain = 1.0
                if i < ramp { gain = 0.5 - 0.5 * ConfigMath.cos(ConfigMath.pi * Double(i) / Double(ramp)) }
                if i >= n - ramp { gain = 0.5 - 0.5 * ConfigMath.cos(ConfigMath.pi * Double(n - 1 - i) / Double(ramp)) }
                let v = peak * gain * ConfigMath.sin(2 * ConfigMath.pi * note.hz * Double(i) / Double(rate))
                out.append(Int16(v.rounded()))
            }
        }
        return out
    }
}
