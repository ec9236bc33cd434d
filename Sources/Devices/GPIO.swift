import CGPIOD

/// The libgpiod version, e.g. `1.6.3`.
public var gpiodVersion: String { String(cString: gpiod_version_string()) }
