import Testing
import Foundation
import Synchronization
import Wire
import Audio
import Platform
@testable import Devices

/// A sink that copies what the capture thread delivers into preallocated storage and
/// signals an eventfd when it has `capacity` frames: the test waits on the fd, not a sleep.
final class RecordingSink: CaptureSink, @unchecked Sendable {
    let storage: UnsafeMutableBufferPointer<Int16>
    let done = try! EventFD()
    let count = Atomic<Int>(0)
    let starts = Atomic<Int>(0)
    let stops = Atomic<Int>(0)
    init(capacity: Int) { storage = .allocate(capacity: capacity); storage.initialize(repeating: 0) }
    deinit { storage.deallocate() }

    func captureStarted(_ format: DeviceFormat) { starts.add(1, ordering: .relaxed) }
    func captureStopped(_ format: DeviceFormat) { stops.add(1, ordering: .relaxed); done.signal() }
    func captured(_ samples: UnsafeRawBufferPointer, frames: Int, format: DeviceFormat, time: Instant) {
        let have = count.load(ordering: .relaxed)
        let n = min(frames * format.channels, storage.count - have)
        guard n > 0 else { return }
        let source = samples.bindMemory(to: Int16.self)
        for i in 0..<n { storage[have + i] = source[i] }
        count.store(have + n, ordering: .releasing)
        if have + n == storage.count { done.signal() }
    }
}

/// Waits (in poll, not sleeping) until `event` is signalled.
func wait(for event: EventFD) throws {
    let loop = try EventLoop()
    var fired = false
    loop.watch(fd: event.fd) { _ in fired = true }
    while !fired { try loop.runOnce() }
}

func toneSamples(_ count: Int, frequency: Double = 440, rate: Double = 48_000, amplitude: Double = 12_000) -> [Int16] {
    (0..<count).map { Int16(amplitude * sin(2 * Double.pi * frequency * Double($0) / rate)) }
}

@Suite struct AudioThreadTests {
    /// Capture through ALSA itself: the `file` plugin's `infile` feeds the PCM (its slave,
    /// `null`, provides no data and no pacing). What the capture thread delivers must be
    /// exactly the samples in the file, in order.
    @Test func captureThroughALSAFilePlugin() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("linnet-alsa-\(getpid())-capture")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let samples = toneSamples(48_000)
        let infile = dir.appendingPathComponent("in.raw").path
        try samples.withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: infile)) }
        let config = """
            pcm.mic { type file slave.pcm { type null } file "/dev/null" infile "\(infile)" format raw }
            """
        var request = PCMRequest()
        request.formats = [.s16LE]
        let pcm = try PCM(device: "mic", stream: .capture, request: request, configuration: config)
        #expect(pcm.format.sampleRate == 48_000 && pcm.format.channels == 1 && pcm.format.periodFrames == 480)
        // Read through the real-time thread code path with the opened PCM.
        let sink = RecordingSink(capacity: 24_000)
        let thread = CaptureThread(pcm: pcm, sink: sink)
        try thread.start()
        try wait(for: sink.done)
        thread.stop()
        #expect(Array(sink.storage) == Array(samples[0..<24_000]))
        #expect(sink.starts.load(ordering: .relaxed) == 1)
        #expect(sink.stops.load(ordering: .relaxed) == 1)
        #expect(thread.counters.frames.load(ordering: .relaxed) >= 24_000)
    }

    /// A WAV file as the microphone (unpaced): every sample arrives, in order, and the
    /// thread finishes by itself at the end of the file.
    @Test func captureFromWAVFile() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("linnet-cap-\(getpid()).wav").path
        defer { unlink(path) }
        let samples = toneSamples(16_000 * 3 / 2, rate: 16_000)
        let writer = try WAVWriter(path: path, sampleRate: 16_000, channels: 1)
        try writer.write(samples)
        try writer.close()
        let sink = RecordingSink(capacity: samples.count)
        let thread = try CaptureThread(input: .file(path, paced: false, loop: false), sink: sink)
        #expect(thread.format.sampleRate == 16_000 && thread.format.periodFrames == 160)
        try thread.start()
        try wait(for: sink.done)
        while !thread.finished && sink.stops.load(ordering: .acquiring) == 0 { try wait(for: sink.done) }
        thread.stop()
        #expect(Array(sink.storage) == samples)
        #expect(thread.finished)
    }

    /// A paced device (no clock of its own, as ALSA's null and file plugins) is stamped
    /// by the pacer's deadlines, not by when the thread got its data: here every read
    /// returns 0–6 ms (of virtual time) late (a loaded machine's wake-ups, a slow
    /// plugin), and the capture times still step by exactly one period, with no
    /// timeline jump. Stamped
    /// from the wake-up, the 2 ms tolerance was crossed again and again, and each jump
    /// moved the echo canceller's reference against the microphone (EchoCommandTests'
    /// live runs: 0–55 jumps in 12 s, the echo back at 1.4 dB).
    @Test func pacedDeviceIsStampedByItsPacer() throws {
        let clock = VirtualClock()
        let mic = LateClocklessMicrophone(clock: clock)
        let sink = TimeRecordingSink(periods: 60)
        let thread = CaptureThread(pcm: mic, sink: sink, paced: true, clock: clock.device)
        try thread.start()
        do {
            defer {
                clock.release()
                thread.stop()
            }
            try clock.run(threads: 1) { sink.count.load(ordering: .acquiring) == sink.times.count }
        }
        let times = Array(sink.times)
        var steps: [Int64] = []
        for k in 1..<times.count { steps.append(times[k] - times[k - 1]) }
        let late = mic.lateness.filter { $0 > 2_000_000 }.count
        print("paced capture: \(late) of \(mic.lateness.count) reads over 2 ms late; period steps \(Set(steps).sorted()) ns; \(thread.counters.timelineJumps.load(ordering: .relaxed)) timeline jumps")
        #expect(late >= 10, "the fake must really be late: \(late) reads over 2 ms")
        #expect(steps.allSatisfy { $0 == 10_000_000 }, "\(steps)")
        // To the nanosecond: period k was captured over the k-th 10 ms from the start.
        #expect(times == (0..<times.count).map { VirtualClock.origin + Int64($0) * 10_000_000 })
        #expect(thread.counters.timelineJumps.load(ordering: .relaxed) == 0)
    }

    @Test func missingDevicesAndFilesAreClearErrors() {
        let sink = RecordingSink(capacity: 1)
        do {
            _ = try CaptureThread(input: .device("hw:CARD=NoSuchCard", PCMRequest()), sink: sink)
            Issue.record("opened a missing card")
        } catch {
            #expect(error.description.contains("cannot open capture device 'hw:CARD=NoSuchCard'"))
        }
        do {
            _ = try CaptureThread(input: .file("/nonexistent/voice.wav", paced: false, loop: false), sink: sink)
            Issue.record("opened a missing file")
        } catch {
            #expect(error.description == "'/nonexistent/voice.wav': No such file or directory")
        }
    }
}

@Suite struct WAVTests {
    @Test func writerAndReaderRoundTrip() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("linnet-rt-\(getpid()).wav").path
        defer { unlink(path) }
        let samples: [Int16] = (0..<1000).map { Int16($0 * 31 - 15_000) }
        let w = try WAVWriter(path: path, sampleRate: 24_000, channels: 2)
        try w.write(samples)
        try w.close()
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(data.count == 44 + 2000)
        // Fields at the canonical offsets (RIFF size, channels, rate, block align, bits, data size).
        func le32(_ o: Int) -> Int { Int(data[o]) | Int(data[o + 1]) << 8 | Int(data[o + 2]) << 16 | Int(data[o + 3]) << 24 }
        #expect(le32(4) == 36 + 2000 && le32(24) == 24_000 && le32(40) == 2000)
        #expect(data[22] == 2 && data[32] == 4 && data[34] == 16)
        let r = try WAVReader(path: path)
        #expect(r.format == WAVFormat(sampleRate: 24_000, channels: 2, sampleFormat: .s16LE, dataOffset: 44, dataLength: 2000))
        var back = [Int16](repeating: 0, count: 1000)
        let n = try back.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(FileError) in try r.read(into: raw) }
        #expect(n == 2000 && back == samples)
    }

    /// Headers written by other tools: WAVE_FORMAT_EXTENSIBLE with 24-bit samples, a LIST
    /// chunk before the data, an odd-sized chunk padded to even.
    @Test func parsesOtherWritersHeaders() throws {
        var bytes: [UInt8] = Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WAVE".utf8)
        bytes += Array("LIST".utf8) + [3, 0, 0, 0] + [1, 2, 3, 0]  // odd size + pad byte
        bytes += Array("fmt ".utf8) + [40, 0, 0, 0]
        bytes += [0xFE, 0xFF, 2, 0] + [0x44, 0xAC, 0, 0] + [0, 0, 0, 0] + [6, 0, 24, 0]
        bytes += [22, 0, 24, 0, 3, 0, 0, 0] + [1, 0] + [UInt8](repeating: 0, count: 14)
        bytes += Array("data".utf8) + [12, 0, 0, 0] + [UInt8](repeating: 0, count: 12)
        let f = try bytes.withBytes { (raw: UnsafeRawBufferPointer) throws(WAVError) in try WAV.parse(raw) }
        #expect(f.sampleRate == 44_100 && f.channels == 2 && f.sampleFormat == .s24_3LE && f.dataLength == 12)
        #expect(f.dataOffset == bytes.count - 12)
    }

    @Test func rejectsWhatItCannotRead() {
        func parse(_ b: [UInt8]) -> WAVError? {
            do { _ = try b.withBytes { (raw: UnsafeRawBufferPointer) throws(WAVError) in try WAV.parse(raw) }; return nil } catch { return error }
        }
        let head: [UInt8] = Array("RIFF".utf8) + [0, 0, 0, 0] + Array("WAVE".utf8)
        func fmt(tag: UInt16, channels: UInt16, rate: UInt32, bits: UInt16) -> [UInt8] {
            Array("fmt ".utf8) + [16, 0, 0, 0, UInt8(tag & 0xFF), UInt8(tag >> 8), UInt8(channels), 0,
                                  UInt8(rate & 0xFF), UInt8((rate >> 8) & 0xFF), UInt8(rate >> 16), 0, 0, 0, 0, 0, 2, 0,
                                  UInt8(bits), 0]
        }
        #expect(parse([]) == .notWAV)
        #expect(parse(Array("RIFX....WAVE".utf8)) == .notWAV)
        #expect(parse(head) == .truncated)
        #expect(parse(head + Array("fmt ".utf8) + [16, 0, 0, 0, 1, 0]) == .truncated)
        #expect(parse(head + Array("data".utf8) + [0, 0, 0, 0]) == .missingFormat)
        #expect(parse(head + fmt(tag: 3, channels: 1, rate: 48_000, bits: 32)) == .unsupportedFormat(tag: 3, bitsPerSample: 32))
        #expect(parse(head + fmt(tag: 1, channels: 1, rate: 48_000, bits: 8)) == .unsupportedFormat(tag: 1, bitsPerSample: 8))
        #expect(parse(head + fmt(tag: 1, channels: 0, rate: 48_000, bits: 16)) == .unsupportedLayout(channels: 0, sampleRate: 48_000))
        #expect(parse(head + fmt(tag: 1, channels: 1, rate: 4_000, bits: 16)) == .unsupportedLayout(channels: 1, sampleRate: 4_000))
        // A chunk claiming to run past the end of the input.
        #expect(parse(head + Array("JUNK".utf8) + [0xFF, 0xFF, 0xFF, 0x7F]) == .truncated)
    }

    @Test func badFilesAreClearErrors() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("linnet-bad-\(getpid()).wav").path
        defer { unlink(path) }
        try Data("<html>not audio</html>".utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: FileError.wav(path: path, .notWAV)) { _ = try WAVReader(path: path) }
        #expect(throws: FileError.self) { _ = try WAVWriter(path: "/nonexistent/dir/out.wav", sampleRate: 48_000, channels: 1) }
    }
}

@Suite struct PlaybackPipelineTests {
    /// Playback hooks run on what is about to be played: a -6.02 dB gain halves every
    /// sample (±1 LSB), then the frame is duplicated into the device's two S16 channels.
    @Test func hooksRunBeforeTheSpeaker() throws {
        let pipeline = try PlaybackPipeline(rate: .hz48000, deviceRate: 48_000, maxPeriodFrames: 480)
        try pipeline.chain.add(try GainHook(gainDB: 20 * log10(0.5)))
        let device = DeviceFormat(sampleFormat: .s16LE, sampleRate: 48_000, channels: 2, periodFrames: 480)
        pipeline.playbackStarted(device)
        let input = toneSamples(480, amplitude: 20_000)
        _ = input.withUnsafeBufferPointer { pipeline.ring.push($0) }
        var out = [Int16](repeating: 0, count: 960)
        let n = out.withUnsafeMutableBytes { pipeline.render(into: $0, frames: 480, format: device, time: .zero) }
        #expect(n == 480)
        for i in 0..<480 {
            #expect(abs(Int(out[2 * i]) - Int(input[i]) / 2) <= 1)
            #expect(out[2 * i] == out[2 * i + 1])
        }
        // The next period finds the ring empty: silence, counted as an underrun.
        _ = out.withUnsafeMutableBytes { pipeline.render(into: $0, frames: 480, format: device, time: .zero) }
        #expect(out.allSatisfy { $0 == 0 })
        #expect(pipeline.underruns.xruns.load(ordering: .relaxed) == 1)
    }
}

/// A paced source that falls far behind (the process was stopped)
/// restarts its schedule from now instead of delivering the missed periods in a burst.
@Suite struct PacerTests {
    @Test func latenessWithinTheBoundIsCaughtUpOnTheSameSchedule() {
        var p = Pacer(periodFrames: 480, sampleRate: 48_000, now: 0)
        #expect(p.advance(now: 0) == 10_000_000)
        // 100 ms late: the absolute schedule holds (deadlines in the past return at once).
        #expect(p.advance(now: 120_000_000) == 20_000_000)
        #expect(p.resyncs == 0)
    }

    @Test func aLongStopRestartsFromNow() {
        var p = Pacer(periodFrames: 480, sampleRate: 48_000, now: 0)
        _ = p.advance(now: 0)
        // 10 s stopped (SIGSTOP): the next deadline is now, then one period at a time.
        #expect(p.advance(now: 10_000_000_000) == 10_000_000_000)
        #expect(p.advance(now: 10_000_000_100) == 10_010_000_000)
        #expect(p.resyncs == 1)
    }
}

/// Each 20 ms frame the loop pops carries the capture time of its
/// first 10 ms, and only whole frames enter the ring (a full ring drops the frame, with
/// its time, and counts it).
@Suite struct CaptureTimestampTests {
    @Test func popFrameReturnsEachFramesCaptureTime() throws {
        let device = DeviceFormat(sampleFormat: .s16LE, sampleRate: 48_000, channels: 1, periodFrames: 480)
        let pipeline = try CapturePipeline(device: device, rate: .hz48000, channel: nil, chain: HookChain(), notify: try EventFD(), ringFrames: 8)
        let period = [Int16](repeating: 100, count: 480)
        func feed(_ ms: Int64) {
            period.withUnsafeBytes { pipeline.captured($0, frames: 480, format: device, time: Instant(nanoseconds: ms * 1_000_000)) }
        }
        pipeline.captureStarted(device)
        var out = [Int16](repeating: 0, count: 960)
        var times: [Int64] = []
        for round in 0..<20 {
            for k in 0..<4 { feed(Int64(round * 40 + k * 10)) }
            while let t = out.withUnsafeMutableBufferPointer({ pipeline.popFrame(into: $0) }) { times.append(t.nanoseconds / 1_000_000) }
        }
        #expect(times == (0..<40).map { Int64($0) * 20 })
        // Overfill: the ring holds 8 frames of 10 ms; the 9th and 10th are dropped whole.
        for k in 0..<10 { feed(10_000 + Int64(k) * 10) }
        #expect(pipeline.overflows.xruns.load(ordering: .relaxed) == 2)
        times = []
        while let t = out.withUnsafeMutableBufferPointer({ pipeline.popFrame(into: $0) }) { times.append(t.nanoseconds / 1_000_000) }
        #expect(times == [10_000, 10_020, 10_040, 10_060])
        #expect(pipeline.ring.availableToRead == 0)
    }
}

/// A microphone with no clock of its own whose reads come back 0–6 ms (of virtual time)
/// after they were asked for (a seeded sequence), as a starved thread or a slow plugin
/// would.
final class LateClocklessMicrophone: PCMDevice, @unchecked Sendable {
    let device = "late-clockless-microphone"
    let format = DeviceFormat(sampleFormat: .s16LE, sampleRate: 48_000, channels: 1, periodFrames: 480)
    let clock: VirtualClock
    var state: UInt64 = 3
    var lateness: [Int64] = []
    init(clock: VirtualClock) {
        self.clock = clock
        lateness.reserveCapacity(256)
    }

    func readRaw(_ buffer: UnsafeMutableRawPointer, frames: Int) -> Int {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        let ns = Int64(state >> 33) % 6_000_000
        guard clock.wait(until: clock.nanoseconds + ns) else { return -Int(EINTR) }
        if lateness.count < lateness.capacity { lateness.append(ns) }
        buffer.initializeMemory(as: Int16.self, repeating: 0, count: frames)
        return frames
    }
    func writeRaw(_ buffer: UnsafeRawPointer, frames: Int) -> Int { -Int(EBADFD) }
    func recover(_ code: Int32) -> Int32 { 0 }
    func delayFrames() -> Int? { 0 }
    func bufferedFrames() -> Int? { nil }
    func discardPending() -> Int32 { 0 }
    func drain() {}
}

/// Records the capture time of each period (`count` of them so far).
final class TimeRecordingSink: CaptureSink, @unchecked Sendable {
    let times: UnsafeMutableBufferPointer<Int64>
    let count = Atomic<Int>(0)
    init(periods: Int) { times = .allocate(capacity: periods); times.initialize(repeating: 0) }
    deinit { times.deallocate() }
    func captureStarted(_ format: DeviceFormat) {}
    func captureStopped(_ format: DeviceFormat) {}
    func captured(_ samples: UnsafeRawBufferPointer, frames: Int, format: DeviceFormat, time: Instant) {
        let k = count.load(ordering: .relaxed)
        guard k < times.count else { return }
        times[k] = time.nanoseconds
        count.store(k + 1, ordering: .releasing)
    }
}
