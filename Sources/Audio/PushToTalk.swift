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
