import Testing
import Foundation

@Suite struct SoundCardMessageTests {
    /// No sound card (the HAT's overlay not active): `devices` lists the cards (none),
    /// and opening a card by name says which cards exist and where to look.
    @Test func missingCardNamesTheCardsThatExist() throws {
        guard !FileManager.default.fileExists(atPath: "/proc/asound/cards") ||
              ((try? String(contentsOfFile: "/proc/asound/cards", encoding: .utf8)) ?? "").contains("no soundcards") else { return }
        let d = try Linnet.run(["devices"])
        #expect(d.status == 0)
        #expect(d.out.contains("Sound cards (/proc/asound/cards):\n  none"), "\(d.out)")
        let a = try Linnet.run(["audio", "--capture", "plughw:CARD=seeed2micvoicec", "--playback", "none", "--seconds", "1"])
        #expect(a.status == 69)
        #expect(a.err.contains("cannot open capture device 'plughw:CARD=seeed2micvoicec': no such device; cards here: none — is the overlay in /boot/firmware/config.txt (or the USB card plugged in)?"), "\(a.err)")
    }
}
