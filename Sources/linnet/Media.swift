// Small text helpers of the commands.
import Wire

/// `1.5` (one decimal, no floating-point printing: Embedded Swift has none).
func tenths(_ seconds: Double) -> String {
    let t = Int(saturating: (seconds * 10).rounded())
    return "\(t / 10).\(t % 10)"
}
