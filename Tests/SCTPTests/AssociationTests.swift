import Testing
import Wire
@testable import SCTP

func makePair(seed: UInt64, config: SCTPConfig = SCTPConfig(), loss: UInt64 = 0, dup: UInt64 = 0,
              jitter: Duration = .zero) -> Pair<SCTPAssociation> {
    var r = SeededRandom(seed: seed)
    let a = SCTPAssociation(config: config, random: &r)
    let b = SCTPAssociation(config: config, random: &r)
    var net = NetEm(seed: seed &+ 1)
    net.lossPerMille = loss
    net.duplicatePerMille = dup
    net.jitter = jitter
    return Pair(a: a, b: b, net: net)
}

func connected(_ p: inout Pair<SCTPAssociation>) -> Bool {
    p.a.isEstablished && p.b.isEstablished
}

@Suite struct AssociationTests {
    @Test func handshakeClientServer() {
        var p = makePair(seed: 1)
        p.a.connect(now: p.now)
        let ok = p.run(for: .seconds(5), until: connected)
        #expect(ok)
        #expect(p.eventsA.contains(.connected) && p.eventsB.contains(.connected))
    }

    @Test func simultaneousInit() {
        var p = makePair(seed: 2)
        p.a.connect(now: p.now)
        p.b.connect(now: p.now)
        let ok = p.run(for: .seconds(5), until: connected)
        #expect(ok)
        #expect(p.a.peerTag == p.b.localTag && p.b.peerTag == p.a.localTag)
        // One message each way proves both sides agree on TSNs.
        try? p.a.send(stream: 1, ppid: 53, data: [1, 2, 3], now: p.now)
        try? p.b.send(stream: 2, ppid: 53, data: [4, 5], now: p.now)
        p.run(for: .seconds(2))
        #expect(p.eventsB.contains(.message(SCTPMessage(streamID: 1, ppid: 53, unordered: false, data: [1, 2, 3]))))
        #expect(p.eventsA.contains(.message(SCTPMessage(streamID: 2, ppid: 53, unordered: false, data: [4, 5]))))
    }
}

/// 512 KiB of seeded noise that message contents are cut from (cheap even in debug builds).
let noise: [UInt8] = {
    var r = SeededRandom(seed: 99)
    var out = [UInt8](repeating: 0, count: 512 * 1024)
    var i = 0
    while i < out.count {
        var v = r.next()
        for _ in 0..<8 { out[i] = UInt8(truncatingIfNeeded: v); v >>= 8; i += 1 }
    }
    return out
}()

/// Deterministic contents of message `i`: a slice of `noise` at an index-dependent
/// offset, stamped with the index.
func payload(_ i: Int, size: Int) -> [UInt8] {
    let start = (i &* 7919) % (256 * 1024)
    var out = Array(noise[start..<(start + size)])
    if size >= 2 { out[0] = UInt8(i & 0xff); out[1] = UInt8((i >> 8) & 0xff) }
    return out
}

/// Sizes from 1 byte to 256 KiB, log-uniform, with both ends included.
func messageSizes(count: Int, seed: UInt64) -> [Int] {
    var r = SeededRandom(seed: seed)
    var sizes: [Int] = [1, 256 * 1024]
    while sizes.count < count {
        let exp = Double(r.next() % 1_000_000) / 1_000_000 * 18  // 2^0 … 2^18
        sizes.append(max(1, min(256 * 1024, Int(pow2(exp)))))
    }
    return sizes
}

func pow2(_ e: Double) -> Double {
    var v = 1.0
    var n = e
    while n >= 1 { v *= 2; n -= 1 }
    // 2^n for n in [0,1) by a short series of ln 2 powers.
    let ln2 = 0.6931471805599453
    var term = 1.0, sum = 1.0
    for k in 1...12 { term *= n * ln2 / Double(k); sum += term }
    return v * sum
}

extension AssociationTests {
    @Test func lossyTransferOrdered() {
        var p = makePair(seed: 11, loss: 200, dup: 50, jitter: .milliseconds(30))
        p.a.connect(now: p.now)
        p.b.connect(now: p.now)
        let ok = p.run(for: .seconds(60), until: connected)
        #expect(ok)
        let sizes = messageSizes(count: 200, seed: 5)
        var next = 0
        var received: [[UInt8]] = []
        let done = p.run(for: .seconds(3600)) { q in
            while next < sizes.count {
                guard q.a.bufferedAmount + sizes[next] <= q.a.config.sendBufferLimit else { break }
                do throws(SCTPError) {
                    try q.a.send(stream: 1, ppid: 53, data: payload(next, size: sizes[next]), now: q.now)
                    next += 1
                } catch {
                    break
                }
            }
            for e in q.eventsB { if case .message(let m) = e { received.append(m.data) } }
            q.eventsB.removeAll()
            return received.count >= sizes.count
        }
        #expect(done)
        #expect(received.count == sizes.count)
        for (i, m) in received.enumerated() where m != payload(i, size: sizes[i]) {
            Issue.record("message \(i) differs")
            break
        }
        print("sent \(p.net.sent) lost \(p.net.lost) dup \(p.net.duplicated) t=\(p.now) steps \(p.steps) stats \(p.a.stats)")
    }
}
