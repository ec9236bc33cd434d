// LinnetBench: runs N frames of one named kernel, for `bench/audio.sh` to count under
// callgrind. Not a product: it is built by bench/build.sh with swiftc against the
// product modules (full Swift -O, or Embedded -Osize as the release binary is built).
//
// usage: linnet-bench <kernel> <frames>
//   kernels: hpf gain agc gate limiter meter mute aec aec_mdf (no delay search) ns chain opus_encode opus_decode
//            aec_erle aec_erle_16k (print "erle_tenths <n>")
//            capture_allocations (prints "allocations <n> frames <m>")
//            wake (48 kHz → 16 kHz, features, the okay_nabu model; prints "wakes <n>")
//
// Each kernel does its per-frame work in an `@inline(never)` function whose name
// starts with `measured`; audio.sh has callgrind collect only inside those
// (`--toggle-collect`), so refilling the input buffer is not counted, and takes the
// difference of two runs (N2 − N1 frames) so set-up and first-call costs cancel.
import Audio
import CAllocCounter
import Codec
import CSystem
import Wire

/// The test signal: 1 s (100 frames of 10 ms) at 48 kHz, repeated. A voiced sound
/// (150 Hz fundamental, harmonics falling 6 dB/octave) in 4 Hz syllables around −26 dBFS
/// RMS, a 300 ms pause of quiet noise (≈ −66 dBFS), and a DC offset of +300 for the
/// high-pass filter to remove. Deterministic (a linear congruential noise source).
struct TestSignal {
    static let frames = 100
    static let frameSamples = 480
    let samples: UnsafeMutablePointer<Int16>

    init() {
        let n = TestSignal.frames * TestSignal.frameSamples
        samples = .allocate(capacity: n)
        var seed: UInt32 = 12345
        for i in 0..<n {
            seed = seed &* 1_664_525 &+ 1_013_904_223
            let noise = Double(Int32(bitPattern: seed) >> 16) / 32768 // ±1
            let t = Double(i) / 48000
            var x = 300 + 12 * noise
            if i < 70 * TestSignal.frameSamples {
                var voiced = 0.0
                for h in 1...8 { voiced += sin(2 * Double.pi * 150 * Double(h) * t) / Double(h) }
                let envelope = 0.5 - 0.5 * cos(2 * Double.pi * 4 * t)
                x += 2600 * envelope * voiced + 200 * noise
            }
            samples[i] = Int16(max(-32768, min(32767, x.rounded())))
        }
    }

    /// Copies frame `index` (mod 100) of `count` samples into `dst`; 20 ms frames take two.
    func fill(_ dst: UnsafeMutableBufferPointer<Int16>, frame index: Int) {
        var k = 0
        var f = index
        while k < dst.count {
            let src = samples + (f % TestSignal.frames) * TestSignal.frameSamples
            let m = min(TestSignal.frameSamples, dst.count - k)
            for j in 0..<m { dst[k + j] = src[j] }
            k += m
            f += 1
        }
    }
}

@inline(never)
func measuredHook<H: AudioHook>(_ hook: H, _ frame: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
    hook.process(frame, info)
}

@inline(never)
func measuredChain(_ chain: HookChain, _ frame: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
    chain.process(frame, info)
}

@inline(never)
func measuredEncode(_ encoder: OpusEncoder, _ pcm: UnsafeBufferPointer<Int16>, _ packet: UnsafeMutableRawBufferPointer) -> Int {
    (try? encoder.encode(pcm, into: packet)) ?? -1
}

@inline(never)
func measuredDecode(_ decoder: OpusDecoder, _ packet: UnsafeRawBufferPointer, _ pcm: UnsafeMutableBufferPointer<Int16>) -> Int {
    (try? decoder.decode(packet, into: pcm)) ?? -1
}

/// Opus as the product configures it (Sources/Media/MediaPath.swift): 48 kHz mono, VOIP,
/// voice signal, 32 kbit/s, in-band FEC planned for 10 % loss, libopus' default complexity.
func productEncoder() -> OpusEncoder? {
    guard let e = try? OpusEncoder(sampleRate: 48_000, channels: 1) else { return nil }
    guard (try? e.setBitrate(32_000)) != nil, (try? e.setFEC(true, expectedLossPercent: 10)) != nil else { return nil }
    return e
}

/// The default capture chain, in the order it runs.
func defaultChain() -> HookChain? {
    let chain = HookChain()
    do throws(AudioError) {
        try chain.add(try HighPassFilter())
        try chain.add(try AutomaticGainControl())
        try chain.add(try NoiseGate())
        try chain.add(try Limiter())
        try chain.add(LevelMeter())
    } catch {
        return nil
    }
    return chain
}

/// The chain `linnet run` builds from the Settings defaults (Sources/Runtime/AudioSetup.swift):
/// high-pass at 80 Hz (`high-pass-hz`), limiter (`limiter = true`), level meter, mute
/// gate; AGC and the noise gate are off by default.
func productChain() -> HookChain? {
    let chain = HookChain()
    do throws(AudioError) {
        try chain.add(try HighPassFilter(cutoffHz: 80))
        try chain.add(try Limiter())
        try chain.add(LevelMeter())
        try chain.add(MuteGate())
    } catch {
        return nil
    }
    return chain
}

func runHook<H: AudioHook>(_ hook: H, _ signal: TestSignal, frames: Int) {
    let buffer = UnsafeMutableBufferPointer<Int16>.allocate(capacity: 480)
    hook.captureDidStart(.standard)
    var silent = 0
    for seq in 0..<frames {
        signal.fill(buffer, frame: seq)
        let info = FrameInfo(format: .standard, sequence: UInt64(seq), captureTime: Instant(nanoseconds: Int64(seq) &* 10_000_000))
        if measuredHook(hook, buffer, info) == .silence { silent += 1 }
    }
    hook.captureDidStop(.standard)
    buffer.deallocate()
    if silent < 0 { print("unreachable") }
}

func runChain(_ chain: HookChain, _ signal: TestSignal, frames: Int) {
    let buffer = UnsafeMutableBufferPointer<Int16>.allocate(capacity: 480)
    chain.start(.standard)
    for seq in 0..<frames {
        signal.fill(buffer, frame: seq)
        let info = FrameInfo(format: .standard, sequence: UInt64(seq), captureTime: Instant(nanoseconds: Int64(seq) &* 10_000_000))
        _ = measuredChain(chain, buffer, info)
    }
    chain.stop()
    buffer.deallocate()
}

/// The echo canceller at 48 kHz: the reference is the test signal, the microphone hears
/// it 120 ms later at half the amplitude (the canceller's work per frame does not depend
/// on the echo path; the delay search runs whenever the far end is active).
func runEcho(_ signal: TestSignal, frames: Int, search: Bool = true) throws(AudioError) {
    let staged = StagedReference()
    let aec = try EchoCanceller(rate: .hz48000, fixedDelayMilliseconds: search ? nil : 100, reference: staged)
    let reference = UnsafeMutableBufferPointer<Int16>.allocate(capacity: 480)
    let buffer = UnsafeMutableBufferPointer<Int16>.allocate(capacity: 480)
    aec.captureDidStart(.standard)
    for seq in 0..<frames {
        signal.fill(reference, frame: seq)
        staged.stage(UnsafeBufferPointer(reference))
        signal.fill(buffer, frame: seq + TestSignal.frames - 12)
        for i in 0..<480 { buffer[i] = buffer[i] / 2 }
        let info = FrameInfo(format: .standard, sequence: UInt64(seq), captureTime: Instant(nanoseconds: Int64(seq) &* 10_000_000))
        _ = measuredHook(aec, buffer, info)
    }
    aec.captureDidStop(.standard)
    reference.deallocate()
    buffer.deallocate()
}

/// ERLE of the echo-path simulation the tests use (Tests/AudioTests/EchoSimulation.swift):
/// far-end speech through a RT60 0.2 s room with a 120 ms delay at −6 dB, measured in
/// far-end-only speech from 8 s to 12 s (after convergence); printed in tenths of a dB.
func runEchoERLE(rate: Int, suppressDB: Int = 0) throws(AudioError) {
    var sc = EchoScenario()
    sc.rate = rate
    let s = sc.make()
    guard let r = SampleRate(rawValue: rate) else { return }
    let staged = StagedReference()
    let aec = try EchoCanceller(rate: r, reference: staged)
    let res = suppressDB > 0 ? try SpeexPreprocessor(rate: r, echoSuppressDB: suppressDB, echo: aec) : nil
    let format = try AudioFormat(sampleRate: r, channels: 1)
    let n = r.samplesPerFrame
    var out = s.mic
    var i = 0
    var seq: UInt64 = 0
    while i + n <= out.count {
        s.reference.withUnsafeBufferPointer { staged.stage(UnsafeBufferPointer(rebasing: $0[i..<(i + n)])) }
        out.withUnsafeMutableBufferPointer { p in
            let frame = UnsafeMutableBufferPointer(rebasing: p[i..<(i + n)])
            let info = FrameInfo(format: format, sequence: seq, captureTime: .zero)
            _ = aec.process(frame, info)
            if let res { _ = res.process(frame, info) }
        }
        i += n
        seq += 1
    }
    let nearStart = Int(sc.nearStart) * rate
    let e = erleDB(mic: s.mic, out: out, (nearStart - 4 * rate)..<nearStart)
    print("erle_tenths " + String(Int((e * 10).rounded())))
}

/// The canceller with its residual suppressor (40 dB) across 24 simulated rooms: seeds
/// 1–4 × echo delays 50, 120 and 250 ms × RT60 0.2 and 0.5 s, at 16 kHz, delay search
/// included. Per RT60: ERLE over the 4 s of far end before the near end joins (mean and
/// worst), and the time to 20 dB (mean and worst; 12 s for never), as the tests measure
/// them (`erleDB`, `convergenceSeconds`).
func runEchoRooms() throws(AudioError) {
    for rt60 in [0.2, 0.5] {
        var erle: [Double] = [], conv: [Double] = []
        for seed in 1...4 {
            for delay in [0.05, 0.12, 0.25] {
                var sc = EchoScenario()
                sc.rt60 = rt60
                sc.seed = UInt64(seed)
                sc.delay = delay
                let s = sc.make()
                let staged = StagedReference()
                let aec = try EchoCanceller(rate: .hz16000, reference: staged)
                let res = try SpeexPreprocessor(rate: .hz16000, echoSuppressDB: 40, echo: aec)
                let format = try AudioFormat(sampleRate: .hz16000, channels: 1)
                var out = s.mic
                var i = 0
                var seq: UInt64 = 0
                while i + 160 <= out.count {
                    s.reference.withUnsafeBufferPointer { staged.stage(UnsafeBufferPointer(rebasing: $0[i..<(i + 160)])) }
                    out.withUnsafeMutableBufferPointer { p in
                        let frame = UnsafeMutableBufferPointer(rebasing: p[i..<(i + 160)])
                        let info = FrameInfo(format: format, sequence: seq, captureTime: .zero)
                        _ = aec.process(frame, info)
                        _ = res.process(frame, info)
                    }
                    i += 160
                    seq += 1
                }
                let nearStart = Int(sc.nearStart) * 16_000
                erle.append(erleDB(mic: s.mic, out: out, (nearStart - 64_000)..<nearStart))
                // The preprocessor's output is one frame late (its overlap-add).
                let shifted = Array(out[160...]) + [Int16](repeating: 0, count: 160)
                conv.append(convergenceSeconds(mic: s.mic, out: shifted, echo: s.echo, rate: 16_000, start: 0,
                                               end: nearStart, targetDB: 20) ?? 12)
            }
        }
        let tag = rt60 < 0.3 ? "rt02" : "rt05"
        print(tag + "_erle_mean_tenths " + String(Int((erle.reduce(0, +) / Double(erle.count) * 10).rounded())))
        print(tag + "_erle_min_tenths " + String(Int(((erle.min() ?? 0) * 10).rounded())))
        print(tag + "_conv_mean_tenths " + String(Int((conv.reduce(0, +) / Double(conv.count) * 10).rounded())))
        print(tag + "_conv_max_tenths " + String(Int(((conv.max() ?? 0) * 10).rounded())))
    }
}

func runEncode(_ signal: TestSignal, frames: Int, complexity: Int32? = nil) -> Bool {
    guard let encoder = productEncoder() else { return false }
    if let complexity, (try? encoder.setComplexity(complexity)) == nil { return false }
    let pcm = UnsafeMutableBufferPointer<Int16>.allocate(capacity: 960)
    let packet = UnsafeMutableRawBufferPointer.allocate(byteCount: 1275, alignment: 1)
    for f in 0..<frames {
        signal.fill(pcm, frame: 2 &* f)
        if measuredEncode(encoder, UnsafeBufferPointer(pcm), packet) <= 0 { return false }
    }
    return true
}

/// Decodes `frames` packets cycling through one second (50 packets) encoded up front.
func runDecode(_ signal: TestSignal, frames: Int) -> Bool {
    guard let encoder = productEncoder(), let decoder = try? OpusDecoder(sampleRate: 48_000, channels: 1) else { return false }
    let pcm = UnsafeMutableBufferPointer<Int16>.allocate(capacity: 960)
    let packets = UnsafeMutableRawBufferPointer.allocate(byteCount: 50 * 1275, alignment: 1)
    var lengths = [Int](repeating: 0, count: 50)
    for f in 0..<50 {
        signal.fill(pcm, frame: 2 &* f)
        let slot = UnsafeMutableRawBufferPointer(rebasing: packets[(f * 1275)..<((f + 1) * 1275)])
        lengths[f] = setupEncode(encoder, UnsafeBufferPointer(pcm), slot)
        if lengths[f] <= 0 { return false }
    }
    for f in 0..<frames {
        let k = f % 50
        let packet = UnsafeRawBufferPointer(rebasing: packets[(k * 1275)..<(k * 1275 + lengths[k])])
        if measuredDecode(decoder, packet, pcm) != 960 { return false }
    }
    return true
}

/// The same encode outside the measured functions (set-up of the decode kernel).
@inline(never)
func setupEncode(_ encoder: OpusEncoder, _ pcm: UnsafeBufferPointer<Int16>, _ packet: UnsafeMutableRawBufferPointer) -> Int {
    (try? encoder.encode(pcm, into: packet)) ?? -1
}

/// The capture thread's work per period, as Devices will run it: device bytes (S16_LE
/// mono, 10 ms) → `InputConverter` → the default chain plus the mute gate → `FrameRing`.
/// Allocation calls are counted on this thread (CAllocCounter's malloc interposition)
/// from frame 100 on; the loop side (ring pop) is not counted.
func runCaptureAllocations(_ signal: TestSignal, frames: Int) -> Bool {
    guard let chain = defaultChain(),
          let converter = try? InputConverter(format: .s16LE, channels: 1),
          let ring = try? FrameRing(slotCount: 16, slotSamples: 480) else { return false }
    let mute = MuteGate()
    guard (try? chain.add(mute)) != nil else { return false }
    let device = UnsafeMutableRawBufferPointer.allocate(byteCount: 960, alignment: 2)
    let frame = UnsafeMutableBufferPointer<Int16>.allocate(capacity: 480)
    let drain = UnsafeMutableBufferPointer<Int16>.allocate(capacity: 480)
    var allocations = 0
    var counted = 0
    chain.start(.standard)
    for seq in 0..<frames {
        signal.fill(drain, frame: seq)
        for i in 0..<480 { device.storeBytes(of: drain[i].littleEndian, toByteOffset: 2 * i, as: Int16.self) }
        if seq % 50 == 0 { mute.setMuted(seq % 100 == 0) }
        let counting = seq >= 100
        if counting { alloc_counter_begin() }
        let n = (try? converter.convert(UnsafeRawBufferPointer(device), into: frame)) ?? 0
        let info = FrameInfo(format: .standard, sequence: UInt64(seq), captureTime: Instant(nanoseconds: Int64(seq) &* 10_000_000))
        let f = UnsafeMutableBufferPointer(rebasing: frame[0..<n])
        _ = chain.process(f, info)
        let pushed = ring.push(UnsafeBufferPointer(f), info: info)
        if counting {
            allocations += alloc_counter_end()
            counted += 1
        }
        if n != 480 || !pushed { return false }
        _ = ring.pop(into: drain)
    }
    chain.stop()
    print("allocations " + String(allocations) + " frames " + String(counted))
    return true
}

func run(_ kernel: String, frames: Int) -> Bool {
    let signal = TestSignal()
    do throws(AudioError) {
        switch kernel {
        case "hpf": runHook(try HighPassFilter(), signal, frames: frames)
        case "hpf80": runHook(try HighPassFilter(cutoffHz: 80), signal, frames: frames)
        case "gain": runHook(try GainHook(gainDB: 6), signal, frames: frames)
        case "agc": runHook(try AutomaticGainControl(), signal, frames: frames)
        case "gate": runHook(try NoiseGate(), signal, frames: frames)
        case "limiter": runHook(try Limiter(), signal, frames: frames)
        case "meter": runHook(LevelMeter(), signal, frames: frames)
        case "mute": runHook(MuteGate(), signal, frames: frames)
        case "aec": try runEcho(signal, frames: frames)
        case "aec_mdf": try runEcho(signal, frames: frames, search: false)
        case "ns": runHook(try SpeexPreprocessor(rate: .hz48000, noiseSuppressDB: 15), signal, frames: frames)
        case "aec_erle": try runEchoERLE(rate: 48_000)
        case "aec_erle_16k": try runEchoERLE(rate: 16_000)
        case "aec_res_erle": try runEchoERLE(rate: 48_000, suppressDB: 40)
        case "aec_rooms": try runEchoRooms()
        case "aec_grid": try runEchoGrid()
        case "chain":
            guard let chain = defaultChain() else { return false }
            runChain(chain, signal, frames: frames)
        case "product_chain":
            guard let chain = productChain() else { return false }
            runChain(chain, signal, frames: frames)
        case "opus_encode": return runEncode(signal, frames: frames)
        case "opus_decode": return runDecode(signal, frames: frames)
        case "opus_encode_c0", "opus_encode_c1", "opus_encode_c2", "opus_encode_c3", "opus_encode_c4", "opus_encode_c5",
             "opus_encode_c6", "opus_encode_c7", "opus_encode_c8", "opus_encode_c9", "opus_encode_c10":
            // The product's encoder at an explicit `complexity` (bench/opus-complexity.sh).
            return runEncode(signal, frames: frames, complexity: Int32(kernel.dropFirst(13)) ?? -1)
        case "capture_allocations": return runCaptureAllocations(signal, frames: frames)
        case "wake": return runWake(signal, frames: frames)
        case "wake_file": return runWakeFile()
        default: return false
        }
    } catch {
        return false
    }
    return true
}

@_cdecl("main")
func benchMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    guard argc == 3, let k = argv[1], let n = argv[2] else {
        print("usage: linnet-bench <kernel> <frames>")
        return 64
    }
    let kernel = String(cString: k)
    let frames = Int(atoi(n))
    defer { if getenv("LINNET_BENCH_RSS") != nil { print("vmhwm_kb " + String(peakResidentKB())) } }
    if !run(kernel, frames: frames) {
        print("linnet-bench: kernel '" + kernel + "' failed or unknown")
        return 70
    }
    return 0
}
