import Wire

/// The pipeline sample rates. 48 kHz is the default (Opus' native rate); 16 and 24 kHz
/// serve speech providers that want them.
public enum SampleRate: Int, Sendable, CaseIterable {
    case hz16000 = 16000
    case hz24000 = 24000
    case hz48000 = 48000

    public init(hertz: Int) throws(AudioError) {
        guard let r = SampleRate(rawValue: hertz) else { throw .unsupportedSampleRate(hertz) }
        self = r
    }

    public var hertz: Int { rawValue }
    /// Samples per channel in one 10 ms frame.
    public var samplesPerFrame: Int { rawValue / 100 }
    /// Index 0…2, used to select per-rate coefficient sets computed at configuration time.
    @inline(__always) var index: Int {
        switch self {
        case .hz16000: return 0
        case .hz24000: return 1
        case .hz48000: return 2
        }
    }
}

/// The format of a capture or playback stream: rate and interleaved channel count.
/// Samples are always signed 16-bit.
public struct AudioFormat: Sendable, Equatable, CustomStringConvertible {
    /// Most channels any component accepts; per-channel state is preallocated for this many.
    public static let maxChannels = 8

    public let sampleRate: SampleRate
    public let channels: Int

    public init(sampleRate: SampleRate = .hz48000, channels: Int = 1) throws(AudioError) {
        guard channels >= 1 && channels <= AudioFormat.maxChannels else { throw .unsupportedChannelCount(channels) }
        self.sampleRate = sampleRate
        self.channels = channels
    }

    /// 48 kHz mono, the default pipeline format.
    public static let standard = AudioFormat(unchecked: .hz48000, 1)

    init(unchecked rate: SampleRate, _ channels: Int) {
        self.sampleRate = rate
        self.channels = channels
    }

    /// Samples per channel in a 10 ms frame.
    public var samplesPerChannel: Int { sampleRate.samplesPerFrame }
    /// Interleaved samples in a 10 ms frame.
    public var samplesPerFrame: Int { sampleRate.samplesPerFrame &* channels }

    public var description: String { String(sampleRate.hertz) + " Hz × " + String(channels) }
}

/// Read-only metadata of one frame. Hooks receive it by value: they may change the
/// samples but never the format, count, sequence number or timestamp.
public struct FrameInfo: Sendable, Equatable {
    public let format: AudioFormat
    /// Samples per channel in this frame (10 ms: 160, 240 or 480).
    public let samplesPerChannel: Int
    /// Frame counter of the capture (or playback) thread; it keeps counting through mute
    /// and across sessions.
    public let sequence: UInt64
    /// When the frame's first sample was captured, on the monotonic clock.
    public let captureTime: Instant
    /// Inside a `HookChain`: the chain's per-frame level cache as this hook may use it
    /// (none outside a chain). Not part of equality.
    var levelCache = LevelCacheView.none

    public init(format: AudioFormat, samplesPerChannel: Int, sequence: UInt64, captureTime: Instant) {
        self.format = format
        self.samplesPerChannel = samplesPerChannel
        self.sequence = sequence
        self.captureTime = captureTime
    }

    /// A full 10 ms frame of `format`.
    public init(format: AudioFormat, sequence: UInt64, captureTime: Instant) {
        self.init(format: format, samplesPerChannel: format.samplesPerChannel, sequence: sequence, captureTime: captureTime)
    }

    public static func == (a: FrameInfo, b: FrameInfo) -> Bool {
        a.format == b.format && a.samplesPerChannel == b.samplesPerChannel && a.sequence == b.sequence
            && a.captureTime == b.captureTime
    }

    public var sampleRate: SampleRate { format.sampleRate }
    public var channels: Int { format.channels }
    /// Interleaved samples in the frame.
    public var sampleCount: Int { samplesPerChannel &* format.channels }
}

/// What a hook wants done with the frame it processed.
public enum HookVerdict: Sendable, Equatable {
    /// Send the frame, changed or not.
    case pass
    /// Send silence instead (the chain zeroes the frame).
    case silence
}
