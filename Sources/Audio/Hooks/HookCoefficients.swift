// What the built-in fixed-point hooks share: their design rule and the conversions
// from the settings' units (dBFS, dB, milliseconds) to the fixed-point figures their
// `process` works with. One file, so every hook converts the same way.
import Wire

// Built-in hooks. Each keeps its hot state behind an `UnsafeMutablePointer` (no
// exclusivity checks, no ARC on the audio thread) and computes its coefficients at
// configuration time, for every pipeline rate at once, so `process` only selects.
// Frames are 10 ms, so per-frame time constants do not depend on the rate.

/// log2 of a mean square in Q16 for a level in dBFS (0 dBFS = full-scale square wave,
/// mean square 2^30): log2 ms = dB / (10·log10 2) + 30.
func meanSquareLog2Q16(dBFS: Double) -> Int32 {
    Int32(saturating: (dBFS / (10 * ConfigMath.log10(2)) + 30) * 65536)
}

/// log2 of an amplitude ratio in Q16 for a gain in dB.
func amplitudeLog2Q16(dB: Double) -> Int32 {
    Int32(saturating: (dB / (20 * ConfigMath.log10(2)) * 65536).rounded())
}

/// A per-frame one-pole coefficient in Q15 for a time constant in milliseconds.
func onePoleQ15(milliseconds: Double) -> Int32 {
    Int32(saturating: (ConfigMath.onePole(tauMilliseconds: milliseconds, frameMilliseconds: 10) * 32768).rounded())
}
