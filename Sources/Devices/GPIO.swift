import CGPIOD

/// The libgpiod version, e.g. `1.6.3`.
public var gpiodVersion: String { String(cString: gpiod_version_string()) }

/// A GPIO chip as `linnet devices` shows it.
public struct GPIOChipInfo: Sendable {
    public var name: String
    public var label: String
    /// Line names by offset ("" for an unnamed line).
    public var lines: [String]
}

public enum GPIOChips {
    /// Every GPIO chip the kernel exposes (`/dev/gpiochip*`) with its named lines; empty
    /// on a machine without GPIO. Chips this user may not open are left out (the button's
    /// errors name them); `LibGPIOD.chips()` has them all.
    public static func list() -> [GPIOChipInfo] {
        var out: [GPIOChipInfo] = []
        for c in LibGPIOD().chips() where c.openError == 0 {
            out.append(GPIOChipInfo(name: c.name, label: c.label, lines: c.lines))
        }
        return out
    }
}
