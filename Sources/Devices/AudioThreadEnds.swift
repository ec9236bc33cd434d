// What the audio threads read from and write to: the sink and source protocols their
// callers implement (under the real-time rules) and the inputs and outputs a thread can
// be given (a device, a file, no speaker). Apart from the threads, which only drive them.
import Wire

/// Receives what the capture thread reads. Called on the real-time thread: an
/// implementation must not allocate, lock, log, block or make system calls other than
/// an eventfd write (ARCHITECTURE.md "Threads").
public protocol CaptureSink: AnyObject {
    /// Before the first period of a capture session (again after a device came back).
    func captureStarted(_ format: DeviceFormat)
    /// One period of raw interleaved samples in `format`; `time` is when its first
    /// frame was captured (a device's: from `snd_pcm_delay`, on the thread's timeline).
    func captured(_ samples: UnsafeRawBufferPointer, frames: Int, format: DeviceFormat, time: Instant)
    /// After the last period of a capture session (stop, end of file, device lost).
    func captureStopped(_ format: DeviceFormat)
}

/// Supplies what the playback thread writes. Same real-time rules as `CaptureSink`.
public protocol PlaybackSource: AnyObject {
    func playbackStarted(_ format: DeviceFormat)
    /// Fills `buffer` with up to `frames` frames in `format`; returns how many it filled
    /// (the rest is played as silence). `time` is when the first of them will be heard
    /// (a device's: now plus `snd_pcm_delay`; a file's or the discard sink's: its own
    /// clock, the moment it is written).
    func render(into buffer: UnsafeMutableRawBufferPointer, frames: Int, format: DeviceFormat, time: Instant) -> Int
    /// The device's buffer was just dropped (a flush asked for with
    /// `PlaybackThread.requestFlush`): drop what is queued here too.
    func playbackFlushed(at time: Instant)
    /// After `render`: whether the loop should be told to queue more (the thread then
    /// writes its `notify` eventfd).
    var wantsMore: Bool { get }
    func playbackStopped(_ format: DeviceFormat)
}

extension PlaybackSource {
    public func playbackFlushed(at time: Instant) {}
    public var wantsMore: Bool { true }
}

/// Where capture reads from.
public enum CaptureInput {
    /// An ALSA PCM by name.
    case device(String, PCMRequest)
    /// A WAV file, read whole at start so the real-time thread makes no file I/O;
    /// `paced` delivers it at the real-time rate (as a microphone would), `loop`
    /// starts again at the end instead of stopping.
    case file(String, paced: Bool, loop: Bool)
}

/// Where playback writes to.
public enum PlaybackOutput {
    case device(String, PCMRequest)
    /// A WAV file (16-bit); `paced` consumes at the real-time rate, on the thread's own
    /// clock, as a device would: playback hooks, the reference and the playout pull
    /// work with it as with a speaker.
    case file(String, format: DeviceFormat, paced: Bool)
    /// No speaker (`playback = none`): consumed at the real-time rate on the thread's
    /// own clock and written nowhere, so the downlink is still played out (decoded,
    /// counted) as it would be to a device.
    case discard(DeviceFormat)
}
