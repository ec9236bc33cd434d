// Why an audio device or file could not be used: the one error both audio threads and
// the duplex pipeline throw, so callers handle a device, a file and a thread alike.
import Audio
import Platform

/// Why an audio device or file could not be used.
public enum DeviceError: Error, Equatable, Sendable, CustomStringConvertible {
    case alsa(ALSAError)
    case file(FileError)
    case thread(SystemError)
    /// The pipeline for the device's format could not be built (a rate or channel
    /// count the converter or resampler does not take).
    case pipeline(AudioError)

    public var description: String {
        switch self {
        case .alsa(let e): return e.description
        case .file(let e): return e.description
        case .thread(let e): return "cannot start the audio thread: \(e)"
        case .pipeline(let e): return e.description
        }
    }
}
