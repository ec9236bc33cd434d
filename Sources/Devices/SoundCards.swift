// The sound cards the kernel has (`/proc/asound/cards`), for `linnet devices` and for
// the error of a device that is not there. Its own file, importing only CSystem: in
// Embedded Swift a file may use a C macro (O_RDONLY) only from a module it imports, and
// the module that first provides one (CALSA also includes <fcntl.h>) is what counts.
import CSystem

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
    public static func parse(_ text: String) -> [SoundCard] {
        var out: [SoundCard] = []
        for line in text.split(separator: "\n") {
            let t = line.drop { $0 == " " }
            guard let open = t.firstIndex(of: "["), let index = Int(t[..<open].filter { $0 != " " }),
                  let close = t[open...].firstIndex(of: "]") else { continue }
            let id = String(t[t.index(after: open)..<close].filter { $0 != " " })
            out.append(SoundCard(index: index, id: id, name: after(" - ", in: t[close...]).map(String.init) ?? ""))
        }
        return out
    }

    /// The card a PCM name points at: `CARD=id` (`plughw:CARD=Device,DEV=0`) or the
    /// index of `hw:1,0` / `plughw:1`; nil for names such as `default` or `dmix`.
    public static func reference(in device: String) -> String? {
        if let card = after("CARD=", in: device[...]) {
            return String(card.prefix { $0 != "," && $0 != " " })
        }
        guard let colon = device.firstIndex(of: ":"), ["hw", "plughw", "sysdefault"].contains(String(device[..<colon])) else { return nil }
        let n = device[device.index(after: colon)...].prefix { $0 != "," }
        return n.isEmpty ? nil : String(n)
    }

    /// What follows the first `marker` in `text` (no Foundation in product code).
    static func after(_ marker: String, in text: Substring) -> Substring? {
        let m = Array(marker.utf8)
        var i = text.startIndex
        while i < text.endIndex {
            if text[i...].utf8.starts(with: m) { return text[text.utf8.index(i, offsetBy: m.count)...] }
            i = text.index(after: i)
        }
        return nil
    }
}
