import Testing
import Wire
@testable import Devices

@Suite struct PCMTests {
    @Test func nullCaptureAndPlayback() throws {
        let capture = try PCM(device: "null", stream: .capture, rate: 48_000, channels: 2)
        var frame = [Int16](repeating: 0, count: 960)
        let n = try frame.withMutableBuffer { (b: UnsafeMutableBufferPointer<Int16>) throws(ALSAError) in try capture.read(into: b) }
        #expect(n == 480)
        let playback = try PCM(device: "null", stream: .playback, rate: 16_000, channels: 1)
        let out = [Int16](repeating: 0, count: 160)
        let m = try out.withBuffer { (b: UnsafeBufferPointer<Int16>) throws(ALSAError) in try playback.write(b) }
        #expect(m == 160)
    }

    /// A device that does not exist is an error naming it, with ALSA's reason.
    @Test func missingDeviceIsAClearError() {
        do {
            _ = try PCM(device: "hw:CARD=NoSuchCard", stream: .capture, rate: 48_000, channels: 1)
            Issue.record("opening a missing card succeeded")
        } catch {
            #expect(error.description.hasPrefix("cannot open capture device 'hw:CARD=NoSuchCard': "))
        }
    }

    @Test func versions() {
        #expect(alsaVersion.hasPrefix("1."))
        #expect(gpiodVersion.hasPrefix("1.") || gpiodVersion.hasPrefix("2."))
    }
}
