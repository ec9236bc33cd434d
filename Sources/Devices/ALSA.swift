/// Devices: the hardware side. ALSA capture and playback (real-time threads, issue 3)
/// and the GPIO push-to-talk button and LEDs (libgpiod, issue 7).
///
/// Design decisions:
/// - A PCM is opened by name, exactly as `arecord -D` takes it (`default`,
///   `plughw:CARD=…`, `hw:1,0`, `dsnoop`), so board docs and users speak one language.
/// - Errors carry the device name and ALSA's own text: "cannot open capture device
///   'hw:3,0': No such file or directory" is what a person needs to see.
import CALSA

/// What ALSA refused, with the device, the call and ALSA's error text.
public enum ALSAError: Error, Equatable, Sendable, CustomStringConvertible {
    case open(device: String, stream: PCMStream, code: Int32)
    case configure(device: String, what: String, code: Int32)
    case io(device: String, code: Int32)

    public var description: String {
        switch self {
        case .open(let d, let s, let c): return "cannot open \(s) device '\(d)': \(ALSAError.text(c))"
        case .configure(let d, let w, let c): return "device '\(d)': cannot set \(w): \(ALSAError.text(c))"
        case .io(let d, let c): return "device '\(d)': \(ALSAError.text(c))"
        }
    }

    public static func text(_ code: Int32) -> String {
        guard let p = snd_strerror(code) else { return "error \(code)" }
        return String(cString: p)
    }
}

/// The direction of a PCM.
public enum PCMStream: Sendable, CustomStringConvertible {
    case capture
    case playback

    var alsa: snd_pcm_stream_t { self == .capture ? SND_PCM_STREAM_CAPTURE : SND_PCM_STREAM_PLAYBACK }
    public var description: String { self == .capture ? "capture" : "playback" }
}

/// The ALSA library version, e.g. `1.2.8`.
public var alsaVersion: String { String(cString: snd_asoundlib_version()) }

/// An open PCM in interleaved signed 16-bit mode.
///
/// Issue 2 needs only this much (the selftest opens `null`); issue 3 grows it into the
/// capture and playback engines with format conversion and recovery.
public final class PCM {
    let handle: OpaquePointer
    public let device: String
    public let stream: PCMStream
    public let rate: UInt32
    public let channels: UInt32

    /// Opens `device` for S16_LE interleaved at `rate` Hz with `channels` channels and
    /// about `latencyMicroseconds` of buffering (ALSA may resample through `plug`).
    public init(device: String, stream: PCMStream, rate: UInt32, channels: UInt32, latencyMicroseconds: UInt32 = 40_000) throws(ALSAError) {
        var h: OpaquePointer? = nil
        let r = snd_pcm_open(&h, device, stream.alsa, 0)
        guard r >= 0, let h else { throw .open(device: device, stream: stream, code: r) }
        let s = snd_pcm_set_params(h, SND_PCM_FORMAT_S16_LE, SND_PCM_ACCESS_RW_INTERLEAVED, channels, rate, 1, latencyMicroseconds)
        guard s >= 0 else {
            snd_pcm_close(h)
            throw .configure(device: device, what: "S16_LE \(rate) Hz \(channels) ch", code: s)
        }
        handle = h
        self.device = device
        self.stream = stream
        self.rate = rate
        self.channels = channels
    }

    deinit { snd_pcm_close(handle) }

    /// Reads up to `frames` frames into `buffer` (interleaved); returns frames read.
    public func read(into buffer: UnsafeMutableBufferPointer<Int16>) throws(ALSAError) -> Int {
        let frames = snd_pcm_uframes_t(buffer.count / Int(channels))
        let n = snd_pcm_readi(handle, buffer.baseAddress, frames)
        guard n >= 0 else { throw .io(device: device, code: Int32(n)) }
        return Int(n)
    }

    /// Writes `buffer` (interleaved); returns frames written.
    public func write(_ buffer: UnsafeBufferPointer<Int16>) throws(ALSAError) -> Int {
        let frames = snd_pcm_uframes_t(buffer.count / Int(channels))
        let n = snd_pcm_writei(handle, buffer.baseAddress, frames)
        guard n >= 0 else { throw .io(device: device, code: Int32(n)) }
        return Int(n)
    }
}
