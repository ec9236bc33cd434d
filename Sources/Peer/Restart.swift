// ICE restart (RFC 8445 §9) on an established peer connection.
//
// Design decisions:
// - A restart changes only ICE: new local ufrag/pwd, the remote's new ones, checks start
//   over. The DTLS association, the SRTP keys, the SCTP association and the RTP sender
//   (SSRC, sequence, timestamp) are kept, as JSEP (RFC 8829 §5.2.1, §5.3.1) does for an
//   `iceRestart` offer with an unchanged fingerprint: no new handshake, no gap in RTP.
// - A remote description that changes the DTLS fingerprint would need a new DTLS
//   association; that is refused (the owner starts a new session instead).
// - Two signaling forms: a full re-offer/answer (backend route, aiortc), and the RFC 8840
//   `application/trickle-ice-sdpfrag` fragment WHIP sends with `PATCH` (RFC 9725 §4.3).
// - Until the restart has a nominated pair, media keeps using the old selected pair
//   (RFC 8445 §9: "the agent MAY continue sending media on the previously selected
//   pair"), unless its consent had already expired (`consentLost`).
import Wire
import SDP
import ICE
import DTLS

/// The ICE part of a restart as RFC 8840 carries it: credentials and candidates.
public struct ICERestartFragment: Equatable, Sendable {
    public var ufrag: String
    public var password: String
    /// Candidate attribute values (`candidate:…`), in order.
    public var candidates: [String]
    public var endOfCandidates: Bool

    public init(ufrag: String, password: String, candidates: [String], endOfCandidates: Bool) {
        self.ufrag = ufrag
        self.password = password
        self.candidates = candidates
        self.endOfCandidates = endOfCandidates
    }

    /// Largest fragment accepted and most candidates kept from one: a fragment comes from
    /// the network, so neither may grow without bound.
    public static let maxBytes = 65_536
    public static let maxCandidates = 64

    /// Parses an `application/trickle-ice-sdpfrag` body (RFC 8840 §9): `a=ice-ufrag`,
    /// `a=ice-pwd`, `a=candidate` and `a=end-of-candidates` lines, at session level or in
    /// the first media section (with BUNDLE every section shares one transport, so
    /// candidates of later sections repeat the first's and are ignored). Other lines
    /// (`m=`, `a=mid`, `a=ice-options`, `a=group`) are skipped.
    public static func parse(_ text: String) throws(SDPError) -> ICERestartFragment {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { throw .empty }
        guard bytes.count <= maxBytes else { throw .tooLarge(size: bytes.count, limit: maxBytes) }
        var ufrag: String?, pwd: String?
        var candidates: [String] = []
        var end = false
        var sections = 0
        var lineNumber = 0
        for raw in bytes.split(separator: 10, omittingEmptySubsequences: true) {
            lineNumber += 1
            var line = raw[...]
            if line.last == 13 { line = line.dropLast() }
            guard !line.isEmpty else { continue }
            // Line types and attribute names are matched as bytes (RFC 8866 §5, RFC 8840
            // §9: SDP is octets), and the prefixes dropped as bytes.
            let text = String(decoding: line, as: UTF8.self)
            if text.startsWithBytes("m=") {
                sections += 1
                continue
            }
            guard sections <= 1 else { continue }
            if text.startsWithBytes("a=ice-ufrag:") {
                ufrag = String(Substring(text.utf8.dropFirst("a=ice-ufrag:".utf8.count)))
            } else if text.startsWithBytes("a=ice-pwd:") {
                pwd = String(Substring(text.utf8.dropFirst("a=ice-pwd:".utf8.count)))
            } else if text.startsWithBytes("a=candidate:") {
                guard candidates.count < maxCandidates else { continue }
                candidates.append(String(Substring(text.utf8.dropFirst(2))))
            } else if text.bytesEqual("a=end-of-candidates") {
                end = true
            } else if !(text.startsWithBytes("a=") || text.startsWithBytes("c=")) {
                throw .invalidLine(line: lineNumber, reason: "not an attribute line of an SDP fragment")
            }
        }
        // RFC 8445 §5.3: ufrag 4–256 ice-chars, pwd 22–256.
        guard let ufrag, let pwd, (4...256).contains(ufrag.utf8.count), (22...256).contains(pwd.utf8.count),
              isICEChars(ufrag), isICEChars(pwd) else {
            throw .noICECredentials(section: "fragment")
        }
        return ICERestartFragment(ufrag: ufrag, password: pwd, candidates: candidates, endOfCandidates: end)
    }

    /// RFC 8839 §5.4 ice-char = ALPHA / DIGIT / "+" / "/".
    static func isICEChars(_ s: String) -> Bool {
        s.utf8.allSatisfy { ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 43 || $0 == 47 }
    }
}

extension Peer {
    /// Offerer: starts an ICE restart (RFC 8445 §9) and returns the new offer: same
    /// fingerprint, setup, SSRC and data channel, new `a=ice-ufrag`/`a=ice-pwd`, the
    /// o= version one higher. Apply the answer with `applyRemoteRestart`. For WHIP,
    /// send `iceRestartFragment()` in a `PATCH` instead of this text.
    public func restartICE(now: Instant) throws(PeerError) -> String {
        guard role == .offerer else { throw .wrongState("an answerer restarts ICE by answering a restart offer") }
        guard !closed, negotiated != nil else { throw .wrongState("ICE restart before the first answer, or after close") }
        let credentials = try Peer.makeCredentials(crypto)
        ice.restart(localCredentials: credentials, now: now)
        sessionVersion += 1
        restartPending = true
        drainICE(now: now)
        do throws(SDPError) {
            let text = try SessionDescription.offer(localDescription()).text
            localDescriptionText = text
            return text
        } catch {
            throw .sdp(error)
        }
    }

    /// Our current ICE credentials and candidates as an RFC 8840 SDP fragment (the body
    /// of a WHIP `PATCH`, `Content-Type: application/trickle-ice-sdpfrag`, or of its
    /// answer): after `restartICE` it carries the new credentials.
    public func iceRestartFragment() -> String {
        let mid = negotiated?.audioMid ?? "0"
        let pt = negotiated?.opusPayloadType ?? configuration.opusPayloadType
        var lines = ["a=ice-options:ice2", "m=audio 9 UDP/TLS/RTP/SAVPF \(pt)", "a=mid:\(mid)",
                     "a=ice-ufrag:\(ice.localCredentials.ufrag)", "a=ice-pwd:\(ice.localCredentials.password)"]
        for c in gathered { lines.append("a=" + c.description) }
        if gatheringComplete { lines.append("a=end-of-candidates") }
        var text = ""
        for l in lines { text += l + "\r\n" }
        return text
    }

    /// Offerer: applies the answer to `restartICE`: either a full SDP answer or an
    /// RFC 8840 fragment (WHIP `PATCH` response). DTLS, SRTP and SCTP are untouched;
    /// an answer with another fingerprint is refused (that is a new session).
    public func applyRemoteRestart(_ text: String, now: Instant) throws(PeerError) {
        guard role == .offerer, restartPending, let offerText = localDescriptionText, let current = negotiated else {
            throw .wrongState("no ICE restart is waiting for an answer")
        }
        if isFullDescription(text) {
            do throws(SDPError) {
                let offer = try SessionDescription.parse(offerText)
                let answer = try SessionDescription.parse(text)
                let n = try NegotiatedSession.negotiate(localOffer: offer, remoteAnswer: answer)
                try checkSameDTLS(n, current)
                guard n.localDTLSRole == current.localDTLSRole else {
                    throw SDPError.mediaMismatch(reason: "the restart answer changes the DTLS role (a new DTLS association)")
                }
                restartPending = false
                applyRemoteICE(ICERestartFragment(ufrag: n.remoteICEUfrag, password: n.remoteICEPwd,
                                                  candidates: n.remoteCandidates, endOfCandidates: n.remoteEndOfCandidates),
                               now: now)
            } catch {
                throw .sdp(error)
            }
        } else {
            let fragment: ICERestartFragment
            do throws(SDPError) { fragment = try ICERestartFragment.parse(text) } catch { throw .sdp(error) }
            restartPending = false
            applyRemoteICE(fragment, now: now)
        }
    }

    /// Answerer, WHIP `PATCH` (RFC 9725 §4.3.2): a fragment with a new ufrag restarts ICE
    /// and the returned fragment (our new credentials and candidates) is the response
    /// body; a fragment with the current ufrag only adds candidates (trickle).
    public func acceptRestartFragment(_ text: String, now: Instant) throws(PeerError) -> String {
        guard role == .answerer, !closed, let current = negotiated else { throw .wrongState("no established session to restart") }
        let fragment: ICERestartFragment
        do throws(SDPError) { fragment = try ICERestartFragment.parse(text) } catch { throw .sdp(error) }
        // ICE credentials compare as bytes (RFC 8839 §5.4 ice-chars).
        if !fragment.ufrag.bytesEqual(current.remoteICEUfrag) || !fragment.password.bytesEqual(current.remoteICEPwd) {
            let credentials = try Peer.makeCredentials(crypto)
            ice.restart(localCredentials: credentials, now: now)
            sessionVersion += 1
        }
        applyRemoteICE(fragment, now: now)
        return iceRestartFragment()
    }

    /// Answerer: a new offer on an established session (`acceptOffer` calls this). A
    /// changed ufrag or pwd is an ICE restart (RFC 8445 §9.2.1.1 for the answerer:
    /// new credentials of our own too); anything else only re-answers.
    func acceptReoffer(_ text: String, current: NegotiatedSession, now: Instant) throws(PeerError) -> String {
        guard !closed, let dtls else { throw .wrongState("the session is closed") }
        let role: SDP.DTLSRole = dtls.role == .client ? .client : .server
        let fresh = try Peer.makeCredentials(crypto)
        do throws(SDPError) {
            let offer = try SessionDescription.parse(text)
            let probe = try SessionDescription.answer(to: offer, localDescription(), role: role)
            let n0 = try NegotiatedSession.negotiate(remoteOffer: offer, localAnswer: probe)
            try checkSameDTLS(n0, current)
            guard n0.localDTLSRole == current.localDTLSRole else {
                throw SDPError.mediaMismatch(reason: "the new offer changes the DTLS role (a new DTLS association)")
            }
            let restart = !n0.remoteICEUfrag.bytesEqual(current.remoteICEUfrag) || !n0.remoteICEPwd.bytesEqual(current.remoteICEPwd)
            var answer = probe
            if restart {
                ice.restart(localCredentials: fresh, now: now)
                sessionVersion += 1
                answer = try SessionDescription.answer(to: offer, localDescription(), role: role)
                applyRemoteICE(ICERestartFragment(ufrag: n0.remoteICEUfrag, password: n0.remoteICEPwd,
                                                  candidates: n0.remoteCandidates, endOfCandidates: n0.remoteEndOfCandidates),
                               now: now)
            } else {
                for line in n0.remoteCandidates {
                    // As in the first offer/answer: an unreadable line is skipped.
                    if let c = try? Candidate(parsing: line), c.isUsable || c.isTCPPassive { _ = ice.addRemoteCandidate(c, now: now) }
                }
                drainICE(now: now)
            }
            let out = answer.text
            localDescriptionText = out
            return out
        } catch {
            throw .sdp(error)
        }
    }

    func isFullDescription(_ text: String) -> Bool {
        // Leading white space skipped byte by byte. A CR LF pair stops the skipping, as
        // it did when this compared Characters ("\r\n" is one, equal to none of them).
        var t = Substring(text).utf8
        while let f = t.first, f == 32 || f == 10 || f == 9 || (f == 13 && t.dropFirst().first != 10) { t = t.dropFirst() }
        return t.starts(with: "v=".utf8)
    }

    /// The restart must keep the DTLS association: the same certificate fingerprints.
    func checkSameDTLS(_ n: NegotiatedSession, _ current: NegotiatedSession) throws(SDPError) {
        let same = n.remoteFingerprints.count == current.remoteFingerprints.count
            && n.remoteFingerprints.allSatisfy { f in current.remoteFingerprints.contains(f) }
        guard same else { throw .mediaMismatch(reason: "the new description changes the DTLS fingerprint (a new session, not an ICE restart)") }
    }

    /// The remote's new credentials and candidates go to ICE; checks start.
    func applyRemoteICE(_ f: ICERestartFragment, now: Instant) {
        ice.setRemoteCredentials(ICECredentials(ufrag: f.ufrag, password: f.password), now: now)
        for line in f.candidates {
            // As in the first offer/answer: an unreadable line is skipped.
            if let c = try? Candidate(parsing: line), c.isUsable || c.isTCPPassive { _ = ice.addRemoteCandidate(c, now: now) }
        }
        if f.endOfCandidates { ice.setRemoteEndOfCandidates(now: now) }
        if var n = negotiated {
            n.remoteICEUfrag = f.ufrag
            n.remoteICEPwd = f.password
            n.remoteCandidates = f.candidates
            n.remoteEndOfCandidates = f.endOfCandidates
            negotiated = n
        }
        drainICE(now: now)
    }
}
