/// Devices: the hardware side. ALSA capture and playback on real-time threads, files
/// standing in for devices, and the GPIO push-to-talk button and LEDs (libgpiod).
///
/// Design decisions:
/// - A PCM is opened by name, exactly as `arecord -D` takes it (`default`,
///   `plughw:CARD=…`, `hw:1,0`, `dsnoop`), so board docs and users speak one language.
/// - Linnet asks for the device's own format and rate (S16/S24/S24_3/S32, 16/44.1/48
///   kHz) rather than forcing ALSA's `plug` conversion: the pipeline converts in fixed
///   point on the capture thread, and `hw:` devices work without a plug layer.
/// - Errors carry the device name and ALSA's own text: "cannot open capture device
///   'hw:3,0': No such file or directory" is what a person needs to see. A device that
///   does not exist also names the sound cards that do (`/proc/asound/cards`), with a
///   pointer to the usual cause on a board: a HAT whose overlay is not active.
import CALSA
import CSystem
import Audio
import Wire

/// What ALSA refused, with the device, the call and ALSA's error text.
public enum ALSAError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The device could not be opened (missing, busy, permission); for a missing one,
    /// the sound cards there are.
    case open(device: String, stream: PCMStream, code: Int32, cards: [SoundCard]? = nil)
    /// The device refused a parameter Linnet needs.
    case configure(device: String, what: String, code: Int32)
    /// A read or write failed and could not be recovered.
    case io(device: String, code: Int32)

    public var description: String {
        switch self {
        case .open(let d, let s, let c, let cards):
            if c == -ENOENT || c == -ENODEV, let cards {
                let here = cards.isEmpty ? "none" : cards.map { $0.description }.joined(separator: ", ")
                // A card the name points at that is there: the device (subdevice, PCM
                // name) is what is wrong, not the overlay.
                // Card ids and indices are ALSA names, compared as bytes (strcmp).
                let cardIsThere = SoundCards.reference(in: d).map { r in cards.contains { $0.id.bytesEqual(r) || String($0.index).bytesEqual(r) } } ?? false
                let pointer = cardIsThere ? "" : " — is the overlay in /boot/firmware/config.txt (or the USB card plugged in)?"
                return "cannot open \(s) device '\(d)': no such device; cards here: \(here)\(pointer) ('linnet devices' lists the devices there are)"
            }
            var hint = ""
            if c == -ENOENT || c == -ENODEV { hint = " ('linnet devices' lists the devices there are)" }
            if c == -EBUSY { hint = " (another program is using it; dsnoop/dmix devices can be shared)" }
            if c == -EACCES || c == -EPERM { hint = " (is this user in the 'audio' group?)" }
            return "cannot open \(s) device '\(d)': \(ALSAError.text(c))\(hint)"
        case .configure(let d, let w, let c): return "device '\(d)': cannot set \(w): \(ALSAError.text(c))"
        case .io(let d, let c): return "device '\(d)': \(ALSAError.text(c))"
        }
    }

    /// The ALSA error code (a negative errno), as the audio threads keep it in
    /// `AudioThreadCounters.lastError`.
    public var code: Int32 {
        switch self {
        case .open(_, _, let c, _), .configure(_, _, let c), .io(_, let c): return c
        }
    }

    public static func text(_ code: Int32) -> String {
        guard let p = snd_strerror(code) else { return "error \(code)" }
        return String(cString: p)
    }

    /// Whether the error means the device went away (USB unplugged) rather than a
    /// passing fault: ENODEV, EBADFD, EIO, ENXIO.
    public static func isDisappearance(_ code: Int32) -> Bool {
        code == -ENODEV || code == -EBADFD || code == -EIO || code == -ENXIO
    }
}

/// The direction of a PCM.
public enum PCMStream: Sendable, CustomStringConvertible {
    case capture
    case playback

    var alsa: snd_pcm_stream_t { self == .capture ? SND_PCM_STREAM_CAPTURE : SND_PCM_STREAM_PLAYBACK }
    public var description: String { self == .capture ? "capture" : "playback" }
}

/// Makes the next PCM open read ALSA's configuration files again (`asound.conf`,
/// `~/.asoundrc`): a device defined there after the process started (a board's
/// asound.conf installed while Linnet waits for it) is then found.
public func reloadALSAConfiguration() { _ = snd_config_update_free_global() }

/// The ALSA library version, e.g. `1.2.8`.
public var alsaVersion: String { String(cString: snd_asoundlib_version()) }

/// The format a device was opened with.
public struct DeviceFormat: Sendable, Equatable, CustomStringConvertible {
    public var sampleFormat: SampleFormat
    public var sampleRate: Int
    public var channels: Int
    /// Frames per period (10 ms at `sampleRate`, or what the device could do nearest).
    public var periodFrames: Int

    public init(sampleFormat: SampleFormat, sampleRate: Int, channels: Int, periodFrames: Int) {
        self.sampleFormat = sampleFormat
        self.sampleRate = sampleRate
        self.channels = channels
        self.periodFrames = periodFrames
    }

    public var bytesPerFrame: Int { channels * sampleFormat.bytesPerSample }

    public var description: String {
        "\(sampleFormat) \(sampleRate) Hz \(channels) ch, \(periodFrames)-frame periods"
    }
}

extension SampleFormat {
    var alsa: snd_pcm_format_t {
        switch self {
        case .s16LE: return SND_PCM_FORMAT_S16_LE
        case .s24LE: return SND_PCM_FORMAT_S24_LE
        case .s24_3LE: return SND_PCM_FORMAT_S24_3LE
        case .s32LE: return SND_PCM_FORMAT_S32_LE
        }
    }

    static let all: [SampleFormat] = [.s16LE, .s32LE, .s24LE, .s24_3LE]
}

/// What to ask a device for.
public struct PCMRequest: Sendable {
    /// Formats in order of preference; the first the device supports is used.
    public var formats: [SampleFormat] = [.s16LE, .s32LE, .s24LE, .s24_3LE]
    public var sampleRate: Int = 48_000
    /// Rates accepted when the device cannot do `sampleRate` (the resampler handles them).
    public var acceptedRates: [Int] = [48_000, 44_100, 16_000, 24_000, 32_000]
    public var channels: Int = 1
    public var periodMicroseconds: Int = 10_000
    public var periods: Int = 4
    /// Pace reads/writes at the real-time rate in Linnet itself: for ALSA plugins that do
    /// not run on a clock (`null`, `file` into a plain file), which would otherwise
    /// deliver or swallow periods as fast as the CPU goes.
    public var paced = false

    public init() {}
}

/// What an audio thread needs of an open PCM: ALSA's (`PCM`), or a test's stand-in
/// with a known delay (the fake devices in Tests/DevicesTests). Class-bound, so the
/// threads hold it without boxing (Embedded Swift takes class-bound existentials).
/// Every method is called on the audio thread: none may allocate or lock.
public protocol PCMDevice: AnyObject {
    /// The name it was opened by (reopened by, after a disappearance).
    var device: String { get }
    var format: DeviceFormat { get }
    /// Frames read, or a negative errno (as `snd_pcm_readi`).
    func readRaw(_ buffer: UnsafeMutableRawPointer, frames: Int) -> Int
    /// Frames written, or a negative errno (as `snd_pcm_writei`).
    func writeRaw(_ buffer: UnsafeRawPointer, frames: Int) -> Int
    /// Recovers from an xrun or suspend (as `snd_pcm_recover`).
    func recover(_ code: Int32) -> Int32
    /// The stream's delay in frames, as `snd_pcm_delay` defines it; nil when the device
    /// cannot say (not running, an error).
    func delayFrames() -> Int?
    /// Frames written and not yet taken by the hardware: the ring buffer's fill
    /// (buffer size minus `snd_pcm_avail`), without the latency behind it that
    /// `delayFrames` adds (a USB link, a DAC's FIFO); nil when it cannot say. Playback.
    func bufferedFrames() -> Int?
    /// Throws away what the device has queued and makes it ready to start again
    /// (`snd_pcm_drop` then `snd_pcm_prepare`); 0 or a negative errno.
    func discardPending() -> Int32
    /// Plays out what is queued (end of playback).
    func drain()
}

/// An open PCM in interleaved read/write mode.
public final class PCM: PCMDevice {
    let handle: OpaquePointer
    public let device: String
    public let stream: PCMStream
    public let format: DeviceFormat
    /// The ring buffer's size in frames (what the hardware parameters came to).
    public let bufferSize: Int

    /// Opens `device` and negotiates a format from `request`.
    ///
    /// `configuration`, when given, is ALSA configuration text (asound.conf syntax) in
    /// which `device` is looked up instead of the system's: how tests build `file`
    /// plugin devices without touching `~/.asoundrc`.
    public init(device: String, stream: PCMStream, request: PCMRequest = PCMRequest(), configuration: String? = nil) throws(ALSAError) {
        calsa_quiet()
        var h: OpaquePointer? = nil
        var r: Int32
        if let configuration {
            r = PCM.openWithConfiguration(&h, device: device, stream: stream, text: configuration)
        } else {
            r = snd_pcm_open(&h, device, stream.alsa, 0)
        }
        guard r >= 0, let h else {
            throw .open(device: device, stream: stream, code: r, cards: r == -ENOENT || r == -ENODEV ? SoundCards.list() : nil)
        }
        do throws(ALSAError) {
            format = try PCM.configure(h, device: device, stream: stream, request: request)
        } catch {
            snd_pcm_close(h)
            throw error
        }
        handle = h
        self.device = device
        self.stream = stream
        var buffer: snd_pcm_uframes_t = 0, period: snd_pcm_uframes_t = 0
        bufferSize = snd_pcm_get_params(h, &buffer, &period) == 0 ? Int(buffer) : format.periodFrames * request.periods
    }

    /// The sound card under the PCM (through plug, dmix, dsnoop…); nil where there is
    /// none (null, file on null, a sound server). Two PCMs on one card share its clock.
    public var card: Int? {
        var info: OpaquePointer? = nil
        guard snd_pcm_info_malloc(&info) == 0, let info else { return nil }
        defer { snd_pcm_info_free(info) }
        guard snd_pcm_info(handle, info) == 0 else { return nil }
        let c = snd_pcm_info_get_card(info)
        return c >= 0 ? Int(c) : nil
    }

    static func openWithConfiguration(_ h: inout OpaquePointer?, device: String, stream: PCMStream, text: String) -> Int32 {
        var top: OpaquePointer? = nil
        var input: OpaquePointer? = nil
        guard snd_config_top(&top) == 0, let top else { return -ENOMEM }
        defer { snd_config_delete(top) }
        let bytes = Array(text.utf8)
        var r = bytes.withUnsafeBufferPointer { p in
            p.withMemoryRebound(to: CChar.self) { snd_input_buffer_open(&input, $0.baseAddress, p.count) }
        }
        guard r == 0, let input else { return r }
        r = snd_config_load(top, input)
        snd_input_close(input)
        guard r == 0 else { return r }
        return snd_pcm_open_lconf(&h, device, stream.alsa, 0, top)
    }

    /// The old S16-only form, kept for the selftest: S16_LE at `rate` with `channels`.
    public convenience init(device: String, stream: PCMStream, rate: UInt32, channels: UInt32) throws(ALSAError) {
        var request = PCMRequest()
        request.formats = [.s16LE]
        request.sampleRate = Int(rate)
        request.acceptedRates = [Int(rate)]
        request.channels = Int(channels)
        try self.init(device: device, stream: stream, request: request)
    }

    deinit { snd_pcm_close(handle) }

    public var rate: UInt32 { UInt32(format.sampleRate) }
    public var channels: UInt32 { UInt32(format.channels) }

    static func configure(_ h: OpaquePointer, device: String, stream: PCMStream, request: PCMRequest) throws(ALSAError) -> DeviceFormat {
        var hwp: OpaquePointer? = nil
        guard snd_pcm_hw_params_malloc(&hwp) == 0, let hw = hwp else { throw .configure(device: device, what: "hardware parameters", code: -ENOMEM) }
        defer { snd_pcm_hw_params_free(hw) }
        func step(_ what: @autoclosure () -> String, _ r: Int32) throws(ALSAError) {
            if r < 0 { throw .configure(device: device, what: what(), code: r) }
        }
        try step("hardware parameters", snd_pcm_hw_params_any(h, hw))
        try step("interleaved access", snd_pcm_hw_params_set_access(h, hw, SND_PCM_ACCESS_RW_INTERLEAVED))
        guard let sample = request.formats.first(where: { snd_pcm_hw_params_test_format(h, hw, $0.alsa) == 0 }) else {
            throw .configure(device: device, what: "a sample format (\(request.formats.map { $0.description }.joined(separator: ", ")))", code: -EINVAL)
        }
        try step("format \(sample)", snd_pcm_hw_params_set_format(h, hw, sample.alsa))
        var channels = UInt32(request.channels)
        try step("\(request.channels) channels", snd_pcm_hw_params_set_channels_near(h, hw, &channels))
        // Prefer the device's own rate among those the pipeline resamples from, so no
        // plug-layer converter runs underneath.
        var rate: UInt32 = 0
        if let r = request.acceptedRates.first(where: { snd_pcm_hw_params_test_rate(h, hw, UInt32($0), 0) == 0 }) {
            rate = UInt32(r)
            try step("rate \(r) Hz", snd_pcm_hw_params_set_rate(h, hw, rate, 0))
        } else {
            throw .configure(device: device, what: "a sample rate (\(request.acceptedRates.map { String($0) }.joined(separator: ", ")) Hz)", code: -EINVAL)
        }
        var period = snd_pcm_uframes_t(Int(rate) * request.periodMicroseconds / 1_000_000)
        var dir: Int32 = 0
        try step("period size", snd_pcm_hw_params_set_period_size_near(h, hw, &period, &dir))
        var buffer = period * snd_pcm_uframes_t(request.periods)
        try step("buffer size", snd_pcm_hw_params_set_buffer_size_near(h, hw, &buffer))
        try step("hardware parameters", snd_pcm_hw_params(h, hw))

        var swp: OpaquePointer? = nil
        guard snd_pcm_sw_params_malloc(&swp) == 0, let sw = swp else { throw .configure(device: device, what: "software parameters", code: -ENOMEM) }
        defer { snd_pcm_sw_params_free(sw) }
        try step("software parameters", snd_pcm_sw_params_current(h, sw))
        try step("avail_min", snd_pcm_sw_params_set_avail_min(h, sw, period))
        // Playback starts once two periods are queued: a little latency bought against
        // an underrun at the very start.
        let threshold = stream == .playback ? period * 2 : 1
        try step("start threshold", snd_pcm_sw_params_set_start_threshold(h, sw, threshold))
        try step("software parameters", snd_pcm_sw_params(h, sw))
        return DeviceFormat(sampleFormat: sample, sampleRate: Int(rate), channels: Int(channels), periodFrames: Int(period))
    }

    /// Reads up to `frames` frames of raw samples; returns frames read or a negative
    /// ALSA error (no Swift error on the real-time path).
    @inline(__always)
    public func readRaw(_ buffer: UnsafeMutableRawPointer, frames: Int) -> Int {
        Int(snd_pcm_readi(handle, buffer, snd_pcm_uframes_t(frames)))
    }

    /// Writes `frames` frames of raw samples; returns frames written or a negative error.
    @inline(__always)
    public func writeRaw(_ buffer: UnsafeRawPointer, frames: Int) -> Int {
        Int(snd_pcm_writei(handle, buffer, snd_pcm_uframes_t(frames)))
    }

    /// Recovers from an xrun (-EPIPE) or a suspend (-ESTRPIPE); returns 0 or the error.
    @inline(__always)
    public func recover(_ code: Int32) -> Int32 {
        snd_pcm_recover(handle, code, 1)
    }

    public func prepare() -> Int32 { snd_pcm_prepare(handle) }
    public func drop() { snd_pcm_drop(handle) }
    public func drain() { snd_pcm_drain(handle) }

    /// `snd_pcm_delay` (alsa-lib pcm.c, "PCM" group of the API reference): "For playback
    /// the delay is defined as the time that a frame that is written to the PCM stream
    /// shortly after this call will take to be actually audible. It is as such the
    /// overall latency from the write call to the final DAC. For capture the delay is
    /// defined as the time that a frame that was digitized by the audio device takes
    /// until it can be read from the PCM stream shortly after this call returns. It is
    /// as such the overall latency from the initial ADC to the read call." In frames.
    /// It is meaningful while the stream runs; a prepared playback stream reports what
    /// is queued. nil on an error (an xrun: the caller recovers and re-anchors).
    @inline(__always)
    public func delayFrames() -> Int? {
        var d: snd_pcm_sframes_t = 0
        guard snd_pcm_delay(handle, &d) == 0 else { return nil }
        return Int(d)
    }

    public func bufferedFrames() -> Int? {
        let avail = snd_pcm_avail_update(handle)
        guard avail >= 0 else { return nil }
        return max(0, bufferSize - Int(avail))
    }

    /// Barge-in: `snd_pcm_drop` "stops the PCM immediately. The pending samples on the
    /// buffer are ignored" (pcm.c); `snd_pcm_prepare` makes it ready for the next write,
    /// which starts it again once the start threshold (two periods) is queued.
    public func discardPending() -> Int32 {
        let r = snd_pcm_drop(handle)
        let p = snd_pcm_prepare(handle)
        return r < 0 ? r : p
    }

    /// Reads up to `buffer.count / channels` frames (S16 PCMs); returns frames read.
    public func read(into buffer: UnsafeMutableBufferPointer<Int16>) throws(ALSAError) -> Int {
        let n = readRaw(UnsafeMutableRawPointer(buffer.baseAddress!), frames: buffer.count / format.channels)
        guard n >= 0 else { throw .io(device: device, code: Int32(n)) }
        return n
    }

    /// Writes `buffer` (interleaved S16); returns frames written.
    public func write(_ buffer: UnsafeBufferPointer<Int16>) throws(ALSAError) -> Int {
        let n = writeRaw(UnsafeRawPointer(buffer.baseAddress!), frames: buffer.count / format.channels)
        guard n >= 0 else { throw .io(device: device, code: Int32(n)) }
        return n
    }
}

/// One PCM device as `linnet devices` shows it.
public struct PCMDeviceInfo: Sendable {
    public var name: String
    public var description: String
    public var capture: Bool
    public var playback: Bool
}

/// What a device can do, probed by opening it.
public struct PCMCapabilities: Sendable {
    public var formats: [SampleFormat]
    public var rates: [Int]
    public var minChannels: Int
    public var maxChannels: Int
}

public enum ALSADevices {
    /// The PCMs ALSA's configuration names (`aplay -L`/`arecord -L`), sound cards first.
    public static func list() -> [PCMDeviceInfo] {
        var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>? = nil
        guard snd_device_name_hint(-1, "pcm", &hints) == 0, let hints else { return [] }
        defer { snd_device_name_free_hint(hints) }
        var out: [PCMDeviceInfo] = []
        var i = 0
        while let hint = hints[i] {
            i += 1
            func get(_ key: String) -> String? {
                guard let p = snd_device_name_get_hint(hint, key) else { return nil }
                defer { free(p) }
                return String(cString: p)
            }
            guard let name = get("NAME") else { continue }
            let ioid = get("IOID")
            // ALSA's hint strings are bytes (compared with strcmp in alsa-lib): split and
            // matched as bytes.
            let description = (get("DESC") ?? "").split(byte: UInt8(ascii: "\n")).joined(separator: " — ")
            out.append(PCMDeviceInfo(name: name, description: description,
                                     capture: ioid.map { $0.bytesEqual("Input") } ?? true,
                                     playback: ioid.map { $0.bytesEqual("Output") } ?? true))
        }
        return out
    }

    /// The formats, rates and channel counts a device accepts (opened non-blocking, so a
    /// busy device answers at once).
    public static func capabilities(_ device: String, stream: PCMStream) -> PCMCapabilities? {
        var hp: OpaquePointer? = nil
        guard snd_pcm_open(&hp, device, stream.alsa, Int32(SND_PCM_NONBLOCK)) >= 0, let h = hp else { return nil }
        defer { snd_pcm_close(h) }
        var hwp: OpaquePointer? = nil
        guard snd_pcm_hw_params_malloc(&hwp) == 0, let hw = hwp else { return nil }
        defer { snd_pcm_hw_params_free(hw) }
        guard snd_pcm_hw_params_any(h, hw) >= 0 else { return nil }
        let formats = SampleFormat.all.filter { snd_pcm_hw_params_test_format(h, hw, $0.alsa) == 0 }
        let rates = [8_000, 16_000, 24_000, 32_000, 44_100, 48_000, 96_000].filter { snd_pcm_hw_params_test_rate(h, hw, UInt32($0), 0) == 0 }
        var minC: UInt32 = 0, maxC: UInt32 = 0
        snd_pcm_hw_params_get_channels_min(hw, &minC)
        snd_pcm_hw_params_get_channels_max(hw, &maxC)
        return PCMCapabilities(formats: formats, rates: rates, minChannels: Int(minC), maxChannels: Int(maxC))
    }
}
