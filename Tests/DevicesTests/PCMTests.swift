import Testing
import Glibc
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

/// The sound cards a missing device's error names ("No such device" alone gives no
/// pointer when the HAT's overlay is not active).
@Suite struct SoundCardTests {
    static let pi = """
         0 [seeed2micvoicec]: seeed-2mic-voic - seeed-2mic-voicecard
                              seeed-2mic-voicecard
         1 [Headphones     ]: bcm2835_headpho - bcm2835 Headphones
                              bcm2835 Headphones
        10 [Device         ]: USB-Audio - USB PnP Sound Device
                              C-Media Electronics Inc. USB PnP Sound Device at usb-0000:01:00.0-1.3, full speed

        """

    @Test func parsesProcAsoundCards() {
        #expect(SoundCards.parse(Self.pi) == [SoundCard(index: 0, id: "seeed2micvoicec", name: "seeed-2mic-voicecard"),
                                              SoundCard(index: 1, id: "Headphones", name: "bcm2835 Headphones"),
                                              SoundCard(index: 10, id: "Device", name: "USB PnP Sound Device")])
        #expect(SoundCards.parse("--- no soundcards ---\n").isEmpty)
        #expect(SoundCards.parse("").isEmpty)
    }

    @Test func cardReferences() {
        #expect(SoundCards.reference(in: "plughw:CARD=seeed2micvoicec,DEV=0") == "seeed2micvoicec")
        #expect(SoundCards.reference(in: "hw:1,0") == "1")
        #expect(SoundCards.reference(in: "plughw:2") == "2")
        #expect(SoundCards.reference(in: "default") == nil)
        #expect(SoundCards.reference(in: "dsnoop") == nil)
    }

    @Test func missingDeviceNamesTheCards() {
        let cards = SoundCards.parse(Self.pi)
        let none = ALSAError.open(device: "plughw:CARD=seeed2micvoicec", stream: .capture, code: -ENODEV, cards: [])
        #expect(none.description == "cannot open capture device 'plughw:CARD=seeed2micvoicec': no such device; cards here: none — "
                + "is the overlay in /boot/firmware/config.txt (or the USB card plugged in)? ('linnet devices' lists the devices there are)")
        let other = ALSAError.open(device: "plughw:CARD=voicehat", stream: .playback, code: -ENODEV, cards: cards)
        #expect(other.description.contains("cards here: 0 seeed2micvoicec (seeed-2mic-voicecard), 1 Headphones (bcm2835 Headphones), 10 Device (USB PnP Sound Device) — is the overlay"))
        // The card is there, the device on it is not: no overlay pointer.
        let there = ALSAError.open(device: "hw:1,7", stream: .capture, code: -ENOENT, cards: cards)
        #expect(!there.description.contains("overlay") && there.description.contains("cards here: 0 seeed2micvoicec"))
        // Other errors are as before.
        #expect(ALSAError.open(device: "hw:0", stream: .capture, code: -EBUSY, cards: nil).description.contains("another program is using it"))
    }

    /// This machine: opening a card that is not there says which cards are.
    @Test func openingAMissingCardListsTheCards() {
        do {
            _ = try PCM(device: "plughw:CARD=seeed2micvoicec", stream: .capture, rate: 48_000, channels: 1)
            Issue.record("opened a card that should not exist here")
        } catch {
            #expect(error.description.contains("no such device; cards here: "), "\(error)")
        }
    }
}
