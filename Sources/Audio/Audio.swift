/// Audio: the frame and format types, the capture/playback hook API, fixed-point DSP,
/// the resampler, sample-format conversion and the lock-free SPSC rings between threads.
///
/// Design decisions:
/// - The capture and playback threads are real-time: everything they call here works in
///   caller-owned or preallocated memory and takes no lock, allocates nothing, logs
///   nothing and does no reference counting. Allocation happens at configuration time
///   (initialisers) and on the control thread (chain edits). Build with `-D RT_AUDIT` to
///   have the compiler check the hot entry points with `@_noLocks`.
/// - A frame is 10 ms of interleaved Int16 PCM in a caller-owned buffer, valid only
///   during the call; its metadata (`FrameInfo`) is a value the hook cannot change.
/// - Hook chains are published as immutable snapshots through one atomic pointer, so the
///   capture thread never waits for the control thread (see `HookChain`).
/// - DSP is fixed point (Q15 samples and coefficients, Q30 for recursive state and
///   polynomials) with explicit saturation; Double is used only to compute coefficients
///   at configuration time and to present meter readings to other threads.
/// - Hot mutable state lives behind `UnsafeMutablePointer`s owned by `final class`es, so
///   the hot path has no exclusivity checks and no reference counting.
import Wire

/// A configuration parameter of an audio component, named in `AudioError` messages.
public enum AudioParameter: Sendable, Equatable {
    case gainDB
    case cutoffHz
    case targetDBFS
    case attackMilliseconds
    case releaseMilliseconds
    case holdMilliseconds
    case maxGainDB
    case minGainDB
    case noiseFloorDBFS
    case thresholdDBFS
    case ceilingDBFS
    case deadlineFrames
    case slotCount
    case slotSamples
    case maxInputFrames
    case filterMilliseconds
    case suppressDB

    public var name: String {
        switch self {
        case .gainDB: return "gain (dB)"
        case .cutoffHz: return "cutoff (Hz)"
        case .targetDBFS: return "target level (dBFS)"
        case .attackMilliseconds: return "attack (ms)"
        case .releaseMilliseconds: return "release (ms)"
        case .holdMilliseconds: return "hold (ms)"
        case .maxGainDB: return "maximum gain (dB)"
        case .minGainDB: return "minimum gain (dB)"
        case .noiseFloorDBFS: return "noise floor (dBFS)"
        case .thresholdDBFS: return "threshold (dBFS)"
        case .ceilingDBFS: return "ceiling (dBFS)"
        case .deadlineFrames: return "deadline (frames)"
        case .slotCount: return "slot count"
        case .slotSamples: return "samples per slot"
        case .maxInputFrames: return "maximum input frames per call"
        case .filterMilliseconds: return "echo filter length (ms)"
        case .suppressDB: return "suppression (dB)"
        }
    }
}

/// Every error of the Audio module. Payloads are plain values (no strings), so an error
/// can be returned on a real-time thread without reference counting.
public enum AudioError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A sample rate the pipeline (16000/24000/48000) or the resampler input
    /// (16000/24000/44100/48000) does not support.
    case unsupportedSampleRate(Int)
    /// A channel count outside 1…8.
    case unsupportedChannelCount(Int)
    /// A configuration value outside its documented range.
    case parameterOutOfRange(AudioParameter, value: Double, minimum: Double, maximum: Double)
    /// A ring capacity or slot count that is not a power of two (or is zero).
    case capacityNotPowerOfTwo(Int)
    /// A destination buffer smaller than the call needs.
    case bufferTooSmall(needed: Int, available: Int)
    /// A channel index past the input's channel count.
    case channelOutOfRange(channel: Int, channels: Int)
    /// A byte buffer that is not a whole number of interleaved sample frames.
    case partialFrame(bytes: Int, bytesPerFrame: Int)
    /// A hook that is already in this chain (hooks are identified by object identity).
    case hookAlreadyInChain
    /// A hook that is not in this chain.
    case hookNotInChain
    /// A position outside the chain (0…count).
    case indexOutOfRange(index: Int, count: Int)
    /// The speexdsp linked is not Linnet's tuned build (its MDF tuning version, 0 for
    /// none): the canceller would converge slower than the tests measured.
    case echoCancellerUntuned(version: Int)

    public var description: String {
        switch self {
        case .unsupportedSampleRate(let r): return "unsupported sample rate " + String(r) + " Hz"
        case .unsupportedChannelCount(let c): return "unsupported channel count " + String(c) + " (1…8)"
        case .parameterOutOfRange(let p, let v, let lo, let hi):
            return p.name + " " + formatDecimal(v) + " is out of range " + formatDecimal(lo) + "…" + formatDecimal(hi)
        case .capacityNotPowerOfTwo(let n): return "capacity " + String(n) + " is not a power of two"
        case .bufferTooSmall(let needed, let available):
            return "buffer too small: " + String(needed) + " samples needed, " + String(available) + " available"
        case .channelOutOfRange(let c, let n):
            return "channel " + String(c) + " does not exist in " + String(n) + "-channel input"
        case .partialFrame(let b, let f):
            return String(b) + " bytes is not a whole number of " + String(f) + "-byte frames"
        case .hookAlreadyInChain: return "hook is already in the chain"
        case .hookNotInChain: return "hook is not in the chain"
        case .indexOutOfRange(let i, let n): return "index " + String(i) + " is outside 0…" + String(n)
        case .echoCancellerUntuned(let v):
            return "the linked speexdsp is not Linnet's tuned build (MDF tuning " + String(v) + ", "
                + String(EchoCanceller.tuning) + " needed): build with make, which links scripts/build-speexdsp.sh's library"
        }
    }
}

/// `value` with two decimals and no floating-point printing (which Embedded Swift lacks).
func formatDecimal(_ value: Double) -> String {
    if value.isNaN { return "nan" }
    if value.isInfinite { return value < 0 ? "-inf" : "inf" }
    let hundredths = (value * 100).rounded()
    if abs(hundredths) > 9e15 { return value < 0 ? "-huge" : "huge" }
    let h = Int64(hundredths)
    let sign = h < 0 ? "-" : ""
    let m = h < 0 ? 0 &- h : h
    let frac = m % 100
    return sign + String(m / 100) + "." + (frac < 10 ? "0" : "") + String(frac)
}

/// Checks `value ∈ minimum…maximum` for a configuration parameter.
@inline(__always)
func checkRange(_ p: AudioParameter, _ value: Double, _ minimum: Double, _ maximum: Double) throws(AudioError) {
    guard value >= minimum && value <= maximum else {
        throw .parameterOutOfRange(p, value: value, minimum: minimum, maximum: maximum)
    }
}
