extension FixedWidthInteger {
    /// `value` rounded toward zero into this type, saturating: NaN becomes `ifNaN`,
    /// anything at or past either end of the range (±∞ included) becomes `min`/`max`.
    ///
    /// The plain `Int(x)` of a `Double` traps (SIGILL) on NaN, ±∞ and out-of-range values,
    /// and such values do arrive: a level meter reads −∞ dBFS for digital silence, a
    /// rate over a zero duration is NaN. Every float-to-integer conversion in product code
    /// goes through this unless its input is checked just before.
    @inlinable
    public init(saturating value: Double, ifNaN: Self = 0) {
        if value.isNaN {
            self = ifNaN
        } else if value <= Double(Self.min) {
            self = .min
        } else if value >= Double(Self.max) {
            // Double(Int64.max) rounds up to 2^63, the first value out of range: `>=`
            // catches it before the conversion below could trap.
            self = .max
        } else {
            self.init(value)
        }
    }
}
