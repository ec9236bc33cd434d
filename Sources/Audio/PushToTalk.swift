import Wire

/// How a push-to-talk button gates the microphone: the `ptt-mode` setting, and the mode
/// the button logic in Devices runs in. One type for both, here beside `MuteGate` (what
/// the button drives), because the pure Settings module and the IO module Devices both
/// use it and Audio is below both.
public enum PTTMode: String, Sendable, Equatable, CaseIterable {
    /// Talk while the button is held.
    case hold
    /// Each press switches between talking and muted.
    case toggle
    /// The microphone stays open; the button does not gate it (long presses are still
    /// reported).
    case open
}

/// A GPIO line (the push-to-talk button, a status LED): by name (`GPIO17`, as the device
/// tree names it) or chip and offset (`gpiochip0:17`; the chip by name, path, number or
/// label). One type for the `ptt`/`leds` settings and the GPIO code in Devices, here
/// for the same reason as `PTTMode`.
public enum GPIOLine: Sendable, Equatable, CustomStringConvertible {
    case name(String)
    case chip(String, offset: Int)

    /// Names compare byte for byte, as the kernel and libgpiod compare line and chip
    /// names (strcmp); the derived `==` would compare them as Unicode text, which links
    /// the standard library's normalisation tables (Wire/Text.swift).
    public static func == (a: GPIOLine, b: GPIOLine) -> Bool {
        switch (a, b) {
        case (.name(let x), .name(let y)): return x.bytesEqual(y)
        case (.chip(let x, let i), .chip(let y, let j)): return i == j && x.bytesEqual(y)
        default: return false
        }
    }

    /// As the config spells it: `GPIO17` or `gpiochip0:17`.
    public var description: String {
        switch self {
        case .name(let n): return n
        case .chip(let c, let o): return "\(c):\(o)"
        }
    }
}
