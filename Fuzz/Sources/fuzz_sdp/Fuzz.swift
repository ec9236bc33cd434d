import FuzzSupport

// SDP (RFC 8866) as a remote offer or answer arrives over HTTP: SessionDescription.parse
// of the body, then both negotiation paths with a fixed local description. Invariants:
// - a parsed description's text parses back to an equal description, except for the
//   order of lines the model keeps raw (`otherLines`: b=, e=, k=, …), which the writer
//   puts in RFC 8866 §5 order (a peer's out-of-order lines are tolerated, not echoed);
//   so the text is a fixed point after one round;
// - an answer built to a parsed offer negotiates against that offer (what we build we
//   accept), and the answer's own text parses back to it.

let local = LocalDescription(
    sessionID: 1, iceUfrag: "fuzz", icePwd: "fuzzfuzzfuzzfuzzfuzzfuzz",
    fingerprints: [Fingerprint(algorithm: "sha-256", bytes: [UInt8](repeating: 0xAB, count: 32))],
    candidates: ["1 1 udp 2130706431 127.0.0.1 50000 typ host"],
    audio: LocalAudio(ssrc: 1, cname: "fuzz", streamID: "fuzz", trackID: "mic"))

/// The description with `otherLines` in the order the serializer writes them (stable:
/// same-type lines keep their order), at session and media level.
func ordered(_ d: SessionDescription) -> SessionDescription {
    func rank(_ line: SDPLine, _ groups: [String]) -> Int {
        groups.firstIndex { $0.unicodeScalars.contains(line.type) } ?? groups.count
    }
    func sorted(_ lines: [SDPLine], _ groups: [String]) -> [SDPLine] {
        lines.enumerated().sorted { a, b in
            let (ra, rb) = (rank(a.element, groups), rank(b.element, groups))
            return ra != rb ? ra < rb : a.offset < b.offset
        }.map { $0.element }
    }
    var out = d
    out.otherLines = sorted(d.otherLines, ["iuep", "b", "rz", "k"])
    for i in out.media.indices { out.media[i].otherLines = sorted(out.media[i].otherLines, ["i", "b", "k"]) }
    return out
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    let remote: SessionDescription
    do throws(SDPError) { remote = try SessionDescription.parse(bytes: bytes) } catch { return 0 }
    let text = remote.text
    do throws(SDPError) {
        let again = try SessionDescription.parse(text)
        invariant(ordered(again) == ordered(remote), "description changed in a round trip:\n\(text)\n→\n\(again.text)")
        invariant(again.text == text, "serialization is not a fixed point:\n\(text)\n→\n\(again.text)")
    } catch {
        invariant(false, "serialized description does not parse: \(error)\n\(text)")
    }

    // The remote as an answer to our offer.
    do throws(SDPError) {
        let offer = try SessionDescription.offer(local)
        _ = try NegotiatedSession.negotiate(localOffer: offer, remoteAnswer: remote)
    } catch {}

    // The remote as an offer: answer it, then negotiate.
    let answer: SessionDescription
    do throws(SDPError) { answer = try SessionDescription.answer(to: remote, local) } catch { return 0 }
    do throws(SDPError) {
        let again = try SessionDescription.parse(answer.text)
        invariant(again == answer, "our answer changed in a round trip:\n\(answer.text)")
        _ = try NegotiatedSession.negotiate(remoteOffer: remote, localAnswer: answer)
    } catch {
        invariant(false, "our own answer is refused: \(error)\noffer:\n\(text)\nanswer:\n\(answer.text)")
    }
    return 0
}
