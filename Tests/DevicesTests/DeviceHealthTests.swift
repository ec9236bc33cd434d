import Testing
import Glibc
import Wire
@testable import Devices

/// The loop's lines about a device, from the state an audio thread leaves in its
/// counters: one when it goes (with ALSA's own text for the code), one when it is back.
@Suite struct DeviceHealthTests {
    @Test func goneOnceThenBackWithHowLong() {
        var h = DeviceHealth(capture: true)
        let t0 = Instant(nanoseconds: 5_000_000_000)
        #expect(h.update(state: .starting, error: 0, now: t0) == nil)
        #expect(h.update(state: .running, error: 0, now: t0) == nil, "a device that never went is not 'back'")
        let gone = h.update(state: .reopening, error: -ENODEV, now: t0 + .milliseconds(100))
        #expect(gone?.level == .warning)
        // ALSA's text for the code, as snd_strerror gives it (an errno's strerror).
        #expect(gone?.text.contains(String(cString: strerror(ENODEV))) == true, "\(gone?.text ?? "")")
        #expect(gone?.text.contains("silence is sent") == true)
        // Retries while it stays gone say nothing more.
        #expect(h.update(state: .reopening, error: -ENOENT, now: t0 + .seconds(2)) == nil)
        let back = h.update(state: .running, error: -ENOENT, now: t0 + .milliseconds(2_600))
        #expect(back?.level == .info && back?.text == "the capture device works again after 2500 ms")
        #expect(h.update(state: .running, error: 0, now: t0 + .seconds(3)) == nil)
        // Gone again: said again.
        #expect(h.update(state: .reopening, error: -EIO, now: t0 + .seconds(4))?.text.hasPrefix("the capture device stopped working") == true)
    }

    @Test func playbackSaysNothingIsPlayed() {
        var h = DeviceHealth(capture: false)
        let line = h.update(state: .reopening, error: -EPIPE, now: .zero)
        #expect(line?.text.contains("nothing is played") == true, "\(line?.text ?? "")")
    }
}
