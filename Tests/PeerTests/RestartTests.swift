import Testing
import Foundation
import Wire
import ICE
import DTLS
import SRTP
import SDP
@testable import Peer

/// Consent loss, ICE restart and NAT rebinding on an established call.
@Suite struct RestartTests {
    /// Frame index carried in the fake payload (see `frame`).
    func index(_ a: ReceivedAudio) -> Int { Int(a.payload[1]) << 8 | Int(a.payload[2]) }

    /// A black hole longer than consent expiry (RFC 7675: 30 s): ICE goes disconnected,
    /// then failed, and nothing is sent after that; once the path is back, an ICE
    /// restart (full re-offer and answer) reconnects without a new DTLS handshake: the
    /// same DTLS connection and SRTP contexts, no DTLS handshake record on the wire,
    /// RTP sequence numbers continuing where they were, and the data channel (same SCTP
    /// association) delivering what was queued during the outage plus new messages.
    @Test(arguments: [true, false])
    func blackholeThenRestart(fullDescriptions: Bool) throws {
        let net = try ImpairedNetwork(seed: fullDescriptions ? 201 : 202)
        let channel = try net.connectWithChannel()
        let dtlsO = try #require(net.offerer.dtls), dtlsA = try #require(net.answerer.dtls)
        let srtpO = try #require(net.offerer.outbound), srtpA = try #require(net.answerer.inbound)
        let ssrc = net.offerer.localSSRC

        // Audio from the offerer all along: which frames produced a packet, and its
        // ordinal among the packets sent (= RTP sequence offset).
        var frameIndex = 0
        var ordinalOfFrame: [Int: Int] = [:]
        let audioTick: (Instant) -> Void = { now in
            let before = net.offerer.stats.rtpSent
            frame(frameIndex, tag: 0xD4).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            if net.offerer.stats.rtpSent > before { ordinalOfFrame[frameIndex] = before }
            frameIndex += 1
        }
        net.run(until: net.now + .seconds(2), each: audioTick)
        try net.offerer.send(channel: channel, text: "before", now: net.now)

        let holeStart = net.now
        net.blackhole(for: .seconds(35))
        // Queued during the outage: SCTP keeps it and retransmits later.
        try net.offerer.send(channel: channel, text: "during", now: net.now)
        net.run(until: holeStart + .seconds(35), each: audioTick)
        let disconnectedAt = try #require(net.firstEvent(true, after: holeStart) { $0 == .iceStateChanged(.disconnected) })
        let failedAt = try #require(net.firstEvent(true, after: holeStart) { $0 == .failed(.iceFailed) })
        let answererFailedAt = try #require(net.firstEvent(false, after: holeStart) { $0 == .failed(.iceFailed) })
        #expect(net.offerer.consentLost && net.answerer.consentLost)
        #expect(!net.offerer.closed && net.offerer.connected)
        // Consent (RFC 7675 §5.1): a check every 4–6 s, disconnected 3 s after an
        // unanswered one, failed 30 s after the last response (which came before the hole).
        #expect(disconnectedAt - holeStart >= .seconds(3) && disconnectedAt - holeStart <= .seconds(9))
        #expect(failedAt - holeStart > .seconds(23) && failedAt - holeStart <= .seconds(30))
        // Nothing is sent without consent: the offerer's RTP stops at failure.
        let sentAtFailure = ordinalOfFrame.count
        net.run(until: net.now + .seconds(1), each: audioTick)
        #expect(ordinalOfFrame.count == sentAtFailure, "RTP was sent after consent expired")

        // The path is back; restart.
        net.logDelivered = true
        let restartAt = net.now
        if fullDescriptions {
            let offer = try net.offerer.restartICE(now: net.now)
            let answer = try net.answerer.acceptOffer(offer, now: net.now)
            #expect(answer.contains("a=ice-ufrag:\(net.answerer.ice.localCredentials.ufrag)"))
            try net.offerer.applyRemoteRestart(answer, now: net.now)
        } else {
            // WHIP: PATCH with the fragment, the answer fragment back.
            _ = try net.offerer.restartICE(now: net.now)
            let fragment = net.offerer.iceRestartFragment()
            let reply = try net.answerer.acceptRestartFragment(fragment, now: net.now)
            try net.offerer.applyRemoteRestart(reply, now: net.now)
        }
        net.drain()
        let reconnected = net.run(within: .seconds(10)) {
            net.offerer.iceState == .connected && net.answerer.iceState == .connected
                && !net.offerer.consentLost && !net.answerer.consentLost
        }
        let up = try #require(reconnected)
        let audioBefore = net.audio(false).count
        net.run(until: net.now + .seconds(3), each: audioTick)
        try net.offerer.send(channel: channel, text: "after", now: net.now)
        try net.answerer.send(channel: channel, text: "reply", now: net.now)
        net.run(until: net.now + .seconds(15), each: audioTick)
        let firstAudioAfter = try #require(net.audio(false).dropFirst(audioBefore).first)

        print("BENCH consent_blackhole(\(fullDescriptions ? "sdp" : "sdpfrag")): disconnected after \((disconnectedAt - holeStart).milliseconds) ms, offerer failed after \((failedAt - holeStart).milliseconds) ms, answerer after \((answererFailedAt - holeStart).milliseconds) ms; restart → both connected in \((up - restartAt).milliseconds) ms, first audio \((firstAudioAfter.arrival - restartAt).milliseconds) ms after restart (simulated)")
        #expect(up - restartAt < .seconds(2))

        // The same DTLS association and SRTP contexts; no handshake datagram since.
        #expect(net.offerer.dtls === dtlsO && net.answerer.dtls === dtlsA)
        #expect(net.offerer.outbound === srtpO && net.answerer.inbound === srtpA)
        #expect(dtlsO.state == .connected && dtlsA.state == .connected)
        let handshakes = net.deliveredLog.filter { $0.bytes.first == 22 }
        #expect(handshakes.isEmpty, "\(handshakes.count) DTLS handshake records after the restart")
        #expect(net.events.filter { if case .connected = $0.event { return true } else { return false } }.count == 2)
        #expect(net.events.filter { $0.event == .dataChannel(.connected) }.count == 2)

        // RTP continues: the same SSRC, and every received packet's sequence number is
        // its send ordinal past the first one's (no reset, no jump).
        let got = net.audio(false)
        let base = try #require(got.first)
        for a in got {
            let ordinal = try #require(ordinalOfFrame[index(a)])
            #expect(a.sequence - base.sequence == Int64(ordinal - ordinalOfFrame[index(base)]!))
        }
        #expect(got.count > audioBefore + 100)
        #expect(net.answerer.receiveStats?.ssrc == ssrc)

        // The data channel: in order, nothing lost, nothing repeated.
        #expect(net.messages(false).map { String(decoding: $0.data, as: UTF8.self) } == ["before", "during", "after"])
        #expect(net.messages(true).map { String(decoding: $0.data, as: UTF8.self) } == ["reply"])
    }

    /// A restart while only `disconnected` (the lead's reconnect path: restart at 3 s):
    /// media moves to the new pair, the call never fails.
    @Test func restartWhileDisconnected() throws {
        let net = try ImpairedNetwork(seed: 203)
        #expect(net.run(within: .seconds(5)) { net.offerer.connected && net.answerer.connected } != nil)
        let start = net.now
        net.blackhole(for: .seconds(8))
        let disconnected = net.run(within: .seconds(10)) { net.offerer.iceState == .disconnected }
        #expect(disconnected != nil)
        net.run(until: start + .seconds(8))
        let offer = try net.offerer.restartICE(now: net.now)
        #expect(net.offerer.iceState == .checking)
        let answer = try net.answerer.acceptOffer(offer, now: net.now)
        try net.offerer.applyRemoteRestart(answer, now: net.now)
        net.drain()
        let up = net.run(within: .seconds(5)) { net.offerer.iceState == .connected && net.answerer.iceState == .connected }
        #expect(up != nil)
        var sent = 0
        let audioBefore = net.audio(false).count
        net.run(until: net.now + .seconds(2), each: { now in
            frame(sent, tag: 0xE5).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            sent += 1
        })
        net.run(until: net.now + .milliseconds(100))
        #expect(net.audio(false).count - audioBefore == sent)
        #expect(!net.events.contains { if case .failed = $0.event { return true } else { return false } })
    }

    /// A restart whose answer never comes (the remote is gone): the old pair carries
    /// media only until its consent would have expired (RFC 7675 §5.1), then nothing.
    @Test func unansweredRestartStopsSendingAtConsentExpiry() throws {
        let net = try ImpairedNetwork(seed: 208)
        #expect(net.run(within: .seconds(5)) { net.offerer.connected && net.answerer.connected } != nil)
        net.run(until: net.now + .seconds(1))
        net.blackhole(for: .seconds(100))
        let start = net.now
        _ = try net.offerer.restartICE(now: net.now)
        var lastSentAt = start
        var n = 0
        net.run(until: start + .seconds(45), each: { now in
            let before = net.offerer.stats.rtpSent
            frame(n, tag: 1).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            n += 1
            if net.offerer.stats.rtpSent > before { lastSentAt = now }
        })
        print("BENCH unanswered_restart: old pair used for \((lastSentAt - start).milliseconds) ms after the restart")
        #expect(lastSentAt - start > .seconds(20) && lastSentAt - start <= .seconds(30))
        #expect(net.offerer.selectedPair == nil)
    }

    /// The same offer again (no new ufrag) is a re-offer, not a restart: the answer
    /// keeps the answerer's credentials and ICE stays connected on the same pair.
    @Test func reofferWithoutNewCredentialsDoesNotRestart() throws {
        let net = try ImpairedNetwork(seed: 209)
        #expect(net.run(within: .seconds(5)) { net.offerer.connected && net.answerer.connected } != nil)
        let credentials = net.answerer.ice.localCredentials
        let pair = net.answerer.selectedPair
        let offer = try #require(net.offerer.localDescriptionText)
        let answer = try net.answerer.acceptOffer(offer, now: net.now)
        #expect(answer.contains("a=ice-ufrag:\(credentials.ufrag)"))
        #expect(net.answerer.ice.localCredentials == credentials)
        #expect(net.answerer.iceState == .connected && net.answerer.selectedPair == pair)
        net.drain()
        #expect(!net.events.contains { $0.event == .iceStateChanged(.checking) && $0.at > Instant(nanoseconds: 10_000_000_000) })
    }

    /// Restart calls in the wrong state, and descriptions a restart cannot take.
    @Test func restartRefusals() throws {
        let net = try ImpairedNetwork(seed: 204)
        #expect(throws: PeerError.self) { _ = try net.answerer.restartICE(now: net.now) }
        #expect(throws: PeerError.self) { try net.offerer.applyRemoteRestart("a=ice-ufrag:abcd\r\n", now: net.now) }
        #expect(net.run(within: .seconds(5)) { net.offerer.connected && net.answerer.connected } != nil)
        let offer = try net.offerer.restartICE(now: net.now)
        // Another certificate in the answer would need a new DTLS association.
        let answer = try net.answerer.acceptOffer(offer, now: net.now)
        var lines = answer.components(separatedBy: "\r\n")
        for i in lines.indices where lines[i].hasPrefix("a=fingerprint:sha-256 ") {
            lines[i] = "a=fingerprint:sha-256 " + (0..<32).map { _ in "CD" }.joined(separator: ":")
        }
        #expect(throws: PeerError.self) { try net.offerer.applyRemoteRestart(lines.joined(separator: "\r\n"), now: net.now) }
        // A fragment without credentials, or with a too short pwd.
        #expect(throws: PeerError.self) { try net.offerer.applyRemoteRestart("m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n", now: net.now) }
        #expect(throws: PeerError.self) { try net.offerer.applyRemoteRestart("a=ice-ufrag:abcd\r\na=ice-pwd:short\r\n", now: net.now) }
        // The genuine answer still works afterwards.
        try net.offerer.applyRemoteRestart(answer, now: net.now)
        #expect(net.run(within: .seconds(5)) { net.offerer.iceState == .connected && net.answerer.iceState == .connected } != nil)
    }

    @Test func fragmentParsing() throws {
        let text = "a=ice-options:trickle ice2\r\na=group:BUNDLE 0 1\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
            + "a=ice-ufrag:EsAw\r\na=ice-pwd:P2uYro0UCOQ4zxjKXaWCBui1\r\n"
            + "a=candidate:1387637174 1 udp 2122260223 192.0.2.1 61764 typ host generation 0\r\n"
            + "a=end-of-candidates\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:1\r\n"
            + "a=candidate:9 1 udp 1 192.0.2.9 9 typ host\r\n"
        let f = try ICERestartFragment.parse(text)
        #expect(f.ufrag == "EsAw" && f.password == "P2uYro0UCOQ4zxjKXaWCBui1")
        #expect(f.candidates == ["candidate:1387637174 1 udp 2122260223 192.0.2.1 61764 typ host generation 0"])
        #expect(f.endOfCandidates)
        // LF only works too; garbage lines and oversize input are errors, not traps.
        #expect((try? ICERestartFragment.parse(text.replacingOccurrences(of: "\r\n", with: "\n")))?.ufrag == "EsAw")
        #expect(throws: SDPError.self) { try ICERestartFragment.parse("hello\r\n") }
        #expect(throws: SDPError.self) { try ICERestartFragment.parse("") }
        #expect(throws: SDPError.self) { try ICERestartFragment.parse(String(repeating: "a=x\r\n", count: 20_000)) }
        #expect(throws: SDPError.self) { try ICERestartFragment.parse("a=ice-ufrag:ab d\r\na=ice-pwd:P2uYro0UCOQ4zxjKXaWCBui1\r\n") }
        // Our own fragment parses back to our credentials and candidates.
        let net = try ImpairedNetwork(seed: 205)
        let own = try ICERestartFragment.parse(net.offerer.iceRestartFragment())
        #expect(own.ufrag == net.offerer.ice.localCredentials.ufrag && own.password == net.offerer.ice.localCredentials.password)
        #expect(own.candidates.count == 1 && own.candidates[0].contains("192.0.2.1 5000 typ host"))
    }

    /// NAT rebinding mid-call (RFC 4787 §4.3): one side's public port changes; datagrams
    /// to the old one vanish. Audio both ways must recover without signaling and the
    /// call must never fail.
    @Test(arguments: [true, false])
    func natRebinding(offererSide: Bool) throws {
        // The silence probe `linnet run` uses (Call.swift): the rebound side, hearing
        // nothing, checks consent from its new port within 1.5 s, which validates that
        // port at the other side (RFC 8445 §7.3.1.4 triggered check).
        let net = try ImpairedNetwork(seed: offererSide ? 206 : 207, configure: { $0.ice.silenceProbe = .milliseconds(1500) })
        #expect(net.run(within: .seconds(5)) { net.offerer.connected && net.answerer.connected } != nil)
        var sent = 0
        let tick: (Instant) -> Void = { now in
            frame(sent, tag: 0xA1).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            frame(sent, tag: 0xB2).withUnsafeBytes { net.answerer.sendAudio($0, samples: 960, now: now) }
            sent += 1
        }
        net.run(until: net.now + .seconds(2), each: tick)
        let rebindAt = net.now
        let frameAtRebind = sent
        net.rebind(offerer: offererSide)
        net.run(until: rebindAt + .seconds(60), each: tick)
        net.run(until: net.now + .milliseconds(100))
        // The direction toward the rebound side is the one that breaks.
        let towardRebound = net.audio(offererSide)
        let resumed = towardRebound.first { index($0) >= frameAtRebind && $0.arrival > rebindAt + .milliseconds(100) }
        let lastSeconds = towardRebound.filter { index($0) >= sent - 500 }
        let failed = net.events.contains { if case .failed = $0.event { return true } else { return false } }
        let switches = net.offerer.iceStats.staleSwitches + net.answerer.iceStats.staleSwitches
        print("BENCH nat_rebinding(\(offererSide ? "offerer" : "answerer") side): audio toward it resumed \(resumed.map { "\(($0.arrival - rebindAt).milliseconds) ms" } ?? "never") after the rebinding; last 10 s: \(lastSeconds.count)/500 frames; stale-pair switches \(switches); failed \(failed); stale-mapping drops \(net.countersToOfferer.staleMapping + net.countersToAnswerer.staleMapping)")
        #expect(!failed)
        #expect(resumed != nil)
        #expect(lastSeconds.count == 500)
        #expect(net.offerer.iceState == .connected && net.answerer.iceState == .connected)
        // The side that sends to the rebound peer now uses its new address.
        let sender = offererSide ? net.answerer : net.offerer
        #expect(sender.selectedPair?.remote == (offererSide ? net.offererMapped : net.answererMapped))
        // And audio the other way is back within the silence probe and a round trip:
        // packets from the new port count once ICE has validated it (RFC 8445 §7.3;
        // before, they were taken from any address), and until then they are dropped
        // as a stranger's would be.
        let fromRebound = net.audio(!offererSide).filter { index($0) >= frameAtRebind }
        #expect(fromRebound.count >= (sent - frameAtRebind) * 95 / 100)
        let receiver = offererSide ? net.answerer : net.offerer
        #expect(receiver.stats.unvalidatedDropped > 0 && receiver.stats.unvalidatedDropped <= 100)
    }
}

