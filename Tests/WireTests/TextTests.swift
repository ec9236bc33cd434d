import Testing
import Wire

/// The byte-wise text helpers (Sources/Wire/Text.swift) against the standard library's
/// own operations as the oracle: on ASCII text, where canonical equivalence and bytes
/// agree, every helper must give what `==`, `hasPrefix`, `split`… give. On non-ASCII
/// text they compare bytes, which the last tests pin down.
@Suite struct TextTests {
    /// Random short texts over an alphabet with the separators the parsers use.
    func samples(_ count: Int, seed: UInt64) -> [String] {
        var rng = SeededRandom(seed: seed)
        let alphabet = Array("ab:,= /\t".utf8)
        return (0..<count).map { _ in
            let n = Int.random(in: 0...9, using: &rng)
            return String(decoding: (0..<n).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &rng)] }, as: UTF8.self)
        }
    }

    @Test func comparisonsAgreeWithTheStandardLibraryOnASCII() {
        let texts = samples(300, seed: 18)
        for a in texts.prefix(60) {
            for b in texts {
                #expect(a.bytesEqual(b) == (a == b), "\(a) vs \(b)")
                #expect(a.startsWithBytes(b) == a.hasPrefix(b), "\(a) starts with \(b)")
                #expect(a.endsWithBytes(b) == a.hasSuffix(b), "\(a) ends with \(b)")
                #expect(a.bytesPrecede(b) == (a < b), "\(a) < \(b)")
                #expect(a.containsBytes(b) == (b.isEmpty || a.contains(b)), "\(a) contains \(b)")
                #expect((TextKey(a) == TextKey(b)) == (a == b))
                if a == b { #expect(TextKey(a).hashValue == TextKey(b).hashValue) }
            }
        }
    }

    @Test func splitAgreesWithTheStandardLibraryOnASCII() {
        for text in samples(500, seed: 7) {
            for separator in [UInt8(ascii: ":"), UInt8(ascii: ","), UInt8(ascii: " ")] {
                let c = Character(Unicode.Scalar(separator))
                for maxSplits in [0, 1, 2, Int.max] {
                    for omitting in [true, false] {
                        let mine = text.split(byte: separator, maxSplits: maxSplits, omittingEmptySubsequences: omitting).map(String.init)
                        let theirs = text.split(separator: c, maxSplits: maxSplits, omittingEmptySubsequences: omitting).map(String.init)
                        #expect(mine == theirs, "'\(text)' at \(separator), max \(maxSplits), omitting \(omitting)")
                    }
                }
            }
        }
    }

    @Test func byteSearchesCutWhereCharacterSearchesDo() {
        for text in samples(300, seed: 3) {
            let colon = UInt8(ascii: ":")
            #expect(text.firstIndex(ofByte: colon) == text.firstIndex(of: ":"))
            #expect(text.lastIndex(ofByte: colon) == text.lastIndex(of: ":"))
            #expect(text.containsByte(colon) == text.contains(":"))
            if let i = text.firstIndex(ofByte: colon) {
                #expect(String(text.bytes(from: text.startIndex, to: i)) == String(text[..<i]))
                #expect(String(text.bytes(from: text.utf8.index(after: i), to: text.endIndex)) == String(text[text.index(after: i)...]))
            }
        }
    }

    @Test func switchMatchesBytes() {
        func kind(_ s: String) -> Int {
            switch s {
            case "offer": return 1
            case "answer": return 2
            case "caf\u{E9}": return 3
            default: return 0
            }
        }
        #expect(kind("offer") == 1)
        #expect(kind("answer") == 2)
        #expect(kind("Offer") == 0)
        #expect(kind("caf\u{E9}") == 3)
        // The same word with a combining accent: equal as Unicode text, other bytes.
        #expect(kind("cafe\u{301}") == 0)
        #expect("cafe\u{301}" == "caf\u{E9}")
    }

    @Test func nonASCIITextComparesAsBytes() {
        let composed = "caf\u{E9}", decomposed = "cafe\u{301}"
        #expect(!composed.bytesEqual(decomposed))
        #expect(composed.bytesEqual("caf\u{E9}"))
        #expect(TextKey(composed) != TextKey(decomposed))
        var keys: [TextKey: Int] = [TextKey(composed): 1]
        keys[TextKey(decomposed)] = 2
        #expect(keys.count == 2)
        // A separator followed by a combining mark is still found: it is a byte.
        let text = "a,\u{301}b"
        #expect(text.split(byte: UInt8(ascii: ",")).map(String.init) == ["a", "\u{301}b"])
        #expect(bytesEqual(nil, nil) && !bytesEqual("a", nil) && bytesEqual("a", "a"))
        #expect(bytesEqual(["a", "b"], ["a", "b"]) && !bytesEqual(["a"], ["a", "b"]))
    }

    @Test func asciiCaseFoldsOnlyASCII() {
        #expect(asciiEqualIgnoringCase("Content-Type", "content-type"))
        #expect(!asciiEqualIgnoringCase("Content-Type", "content-typ"))
        #expect(lowercasedASCII("BUNDLE Opus") == "bundle opus")
        // Ä stays Ä: no Unicode case tables.
        #expect(lowercasedASCII("\u{C4}B") == "\u{C4}b")
        #expect(!asciiEqualIgnoringCase("\u{C4}", "\u{E4}"))
    }
}
