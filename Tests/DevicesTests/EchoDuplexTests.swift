import Testing
import Foundation
import Wire
import Audio
import Platform
@testable import Devices

/// Echo cancellation through both real audio threads (stand-in devices with known
/// delays, as `DuplexTests`): the speaker plays noise, the microphone hears it through
/// 7 ms of air on top of the devices' own delays; the canceller, fed by the duplex
/// pipeline's reference (`LiveReference`), removes it. Measured with recorders before and
/// after the canceller in the capture chain.
@Suite(.serialized) struct EchoDuplexTests {
    @Test func cancelsWhatTheSpeakerPlays() throws {
        let air = FakeAir()
        let speaker = FakeSpeaker(air: air, bufferFrames: 2_400, latencyFrames: 1_440)
        let microphone = FakeMicrophone(air: air, latencyFrames: 240, acousticDelayFrames: 336)
        let frames = 300
        let before = ReferenceRecorder(frames: frames), after = ReferenceRecorder(frames: frames)
        let live = LiveReference()
        let aec = try EchoCanceller(rate: .hz48000, reference: live)
        let capture = HookChain()
        for h in [before, aec, after] as [any AudioHook] { try capture.add(h) }
        let duplex = try DuplexAudio(configuration: DuplexConfiguration(capture: nil, playback: .discard(DuplexTests.mono48)),
                                     capturePCM: microphone, playbackPCM: speaker, captureChain: capture,
                                     clock: air.clock.device)
        live.source = duplex.reference
        before.source = duplex.reference
        after.source = duplex.reference
        let loop = try EventLoop()
        let noise = Noise()
        duplex.attach(to: loop, frameSamples: 960, uplink: { _, _ in }, downlink: { noise.fill($0, 960) })
        try run(duplex, on: air.clock, loop: loop) { after.count.load(ordering: .acquiring) == frames }

        // The last second (after 2 s of convergence), in 100 ms stretches where the
        // microphone heard sound (a speaker run dry leaves silence: nothing to cancel;
        // on virtual time it never runs dry, so that is every stretch).
        var mic = 0.0, out = 0.0, stretches = 0
        for s in 20..<30 {
            var m = 0.0, o = 0.0
            for i in (s * 4_800)..<((s + 1) * 4_800) {
                m += Double(before.captured[i]) * Double(before.captured[i])
                o += Double(after.captured[i]) * Double(after.captured[i])
            }
            guard m > 4_800 * 1e6 else { continue }
            mic += m; out += o; stretches += 1
        }
        let erle = 10 * log10(mic / max(out, 1))
        print("AEC through the duplex threads (48 kHz, noise, 7 ms of air): ERLE \(String(format: "%.1f", erle)) dB over \(stretches) stretches of 100 ms; delay found \(aec.estimatedDelayMilliseconds.map { String(format: "%.1f", $0) } ?? "none") ms, \(speaker.underruns.load(ordering: .relaxed)) underruns")
        #expect(speaker.underruns.load(ordering: .relaxed) == 0)
        #expect(stretches == 10)
        // Measured 22.0 dB on virtual time (noise, a pure delay, the float speexdsp of the
        // full build), the same under the sanitizers: the threads are never late there.
        #expect(erle >= 15)
    }
}
