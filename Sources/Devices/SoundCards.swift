// The sound cards the kernel has (`/proc/asound/cards`), for `linnet devices` and for
// the error of a device that is not there. Its own file, importing only CSystem: in
// Embedded Swift a file may use a C macro (O_RDONLY) only from a module it imports, and
// the module that first provides one (CALSA also includes <fcntl.h>) is what counts.
import CSystem
import Wire

/// A sound card the kernel has: its index, its id (what `CARD=` takes) and its name.
public struct SoundCard: Sendable, Equatable, CustomStringConvertible {
    public var index: Int
    public var id: String
    public var name: String

    public init(index: Int, id: String, name: String) {
        self.index = index
        self.id = id
        self.name = name
    }

    /// `0 seeed2micvoicec (seeed-2mic-voicecard)`.
    public var description: String { name.isEmpty ? "\(index) \(id)" : "\(index) \(id) (\(name))" }
}

public enum SoundCards {
    public static let path = "/proc/asound/cards"

    /// The cards in `/proc/asound/cards`; none when it is missing (no ALSA driver loaded).
    public static func list() -> [SoundCard] {
        let fd = csystem_open(path, O_RDONLY | O_CLOEXEC, 0)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 65_536 {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && csystem_errno() == EINTR { continue }
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        return parse(String(decoding: bytes, as: UTF8.self))
    }

    /// `/proc/asound/cards` (sound/core/init.c): per card a line
    /// ` 0 [seeed2micvoicec]: seeed-2mic-voic - seeed-2mic-voicecard` (index, id padded
    /// to 15 in brackets, driver, " - ", name) and an indented long-name line; with no
    /// cards, `--- no soundcards ---`.
    ///
    /// The kernel writes it as bytes; it is read as bytes (Wire/Text.swift).
    public static func parse(_ text: String) -> [SoundCard] {
        var out: [SoundCard] = []
        for line in text.split(byte: UInt8(ascii: "\n")) {
            let t = Substring(line.utf8.drop { $0 == UInt8(ascii: " ") })
            guard let open = t.firstIndex(ofByte: UInt8(ascii: "[")),
                  let index = Int(String(decoding: t.utf8[..<open].filter { $0 != UInt8(ascii: " ") }, as: UTF8.self)),
                  let close = t.bytes(from: open, to: t.endIndex).firstIndex(ofByte: UInt8(ascii: "]")) else { continue }
            let id = String(decoding: t.utf8[t.utf8.index(after: open)..<close].filter { $0 != UInt8(ascii: " ") }, as: UTF8.self)
            out.append(SoundCard(index: index, id: id, name: after(" - ", in: t.bytes(from: close, to: t.endIndex)).map(String.init) ?? ""))
        }
        return out
    }

    /// The card a PCM name points at: `CARD=id` (`plughw:CARD=Device,DEV=0`) or the
    /// index of `hw:1,0` / `plughw:1`; nil for names such as `default` or `dmix`.
    /// PCM names are bytes to ALSA (it compares them with strcmp): matched as bytes.
    public static func reference(in device: String) -> String? {
        if let card = after("CARD=", in: device[...]) {
            return String(Substring(card.utf8.prefix { $0 != UInt8(ascii: ",") && $0 != UInt8(ascii: " ") }))
        }
        guard let colon = device.firstIndex(ofByte: UInt8(ascii: ":")),
              ["hw", "plughw", "sysdefault"].containsBytes(equalTo: device.bytes(from: device.startIndex, to: colon)) else { return nil }
        let n = Substring(device.utf8[device.utf8.index(after: colon)...].prefix { $0 != UInt8(ascii: ",") })
        return n.isEmpty ? nil : String(n)
    }

    /// What follows the first `marker` in `text` (no Foundation in product code).
    static func after(_ marker: String, in text: Substring) -> Substring? {
        let m = Array(marker.utf8), bytes = text.utf8
        var i = bytes.startIndex
        while i < bytes.endIndex {
            if bytes[i...].starts(with: m) { return Substring(bytes[bytes.index(i, offsetBy: m.count)...]) }
            i = bytes.index(after: i)
        }
        return nil
    }
}
