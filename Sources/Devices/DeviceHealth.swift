// What the loop says about an audio thread's device. The thread never logs (real-time
// rule); it leaves its state and last ALSA error in its counters, and the loop turns
// their changes into one line when the device stops working and one when it is back.
import Wire

public struct DeviceHealth {
    /// Which device; a Bool rather than the side's name compared as a String, whose `==`
    /// would link Unicode normalisation into the release binary (scripts/unicode-users.py).
    let capture: Bool
    /// When the device was seen gone (nil: working, or never started).
    private(set) var goneSince: Instant?

    public init(capture: Bool) { self.capture = capture }

    /// The line to log for the thread's state now, if it changed what there is to say.
    /// `error` is the thread's last ALSA code (a negative errno).
    public mutating func update(state: AudioThreadState, error: Int32, now: Instant) -> (level: LogLevel, text: String)? {
        switch state {
        case .reopening:
            guard goneSince == nil else { return nil }
            goneSince = now
            let why = error < 0 ? ALSAError.text(error) : "no error code"
            return (.warning, "the \(capture ? "capture" : "playback") device stopped working (\(why)); it is reopened until it is back, and \(capture ? "silence is sent" : "nothing is played") meanwhile")
        case .running:
            guard let since = goneSince else { return nil }
            goneSince = nil
            return (.info, "the \(capture ? "capture" : "playback") device works again after \((now - since).milliseconds) ms")
        case .starting, .finished, .stopped:
            return nil
        }
    }
}
