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
    /// on a machine without GPIO (or without permission to open the chips).
    public static func list() -> [GPIOChipInfo] {
        guard let iterator = gpiod_chip_iter_new() else { return [] }
        defer { gpiod_chip_iter_free(iterator) }
        var out: [GPIOChipInfo] = []
        while let chip = gpiod_chip_iter_next(iterator) {
            var lines: [String] = []
            for offset in 0..<gpiod_chip_num_lines(chip) {
                if let line = gpiod_chip_get_line(chip, offset), let name = gpiod_line_name(line) {
                    lines.append(String(cString: name))
                } else {
                    lines.append("")
                }
            }
            out.append(GPIOChipInfo(name: String(cString: gpiod_chip_name(chip)), label: String(cString: gpiod_chip_label(chip)), lines: lines))
        }
        return out
    }
}
