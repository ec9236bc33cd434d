// `linnet selftest`: every C library exercised for real, in-process, so a board (or
// qemu) shows in one command that the binary and its libraries work there.
import CSystem
import Wire
import Platform
import Codec
import SRTP
import DTLS
import Devices
import Agent
import ICE

public enum SelfTest {
    struct Failure: Error {
        let why: String
        init(_ why: String) { self.why = why }
    }

    public static func run() -> ExitStatus {
        let checks: [(String, () throws(Failure) -> String)] = [
            ("crc", crc),
            ("opus", opus),
            ("srtp", srtp),
            ("dtls-identity", identity),
            ("alsa-null", alsa),
            ("gpiod", gpiod),
            ("clock", clock),
        ]
        var passed = 0, failed = 0
        for (name, check) in checks {
            do {
                let detail = try check()
                writeOut("ok    \(name): \(detail)\n")
                passed += 1
            } catch {
                writeOut("FAIL  \(name): \(error.why)\n")
                failed += 1
            }
        }
        writeOut("selftest: \(passed) passed, \(failed) failed\n")
        return failed == 0 ? .ok : .software
    }

    /// CRC-32 and CRC-32c of "123456789": the published check values (the CRC
    /// catalogue's CRC-32/ISO-HDLC and CRC-32/ISCSI entries).
    static func crc() throws(Failure) -> String {
        let input = Array("123456789".utf8)
        let a = CRC32.checksum(input), b = CRC32C.checksum(input)
        guard a == 0xCBF4_3926 else { throw Failure("CRC-32 gave \(Hex.encode(be32(a)))") }
        guard b == 0xE306_9283 else { throw Failure("CRC-32c gave \(Hex.encode(be32(b)))") }
        return "CRC-32 cbf43926, CRC-32c e3069283"
    }

    /// Runs `body`, turning its typed error into a `Failure` carrying its description.
    static func attempt<T, E: Error & CustomStringConvertible>(_ body: () throws(E) -> T) throws(Failure) -> T {
        do { return try body() } catch { throw Failure(error.description) }
    }

    /// The error `body` throws, or nil when it succeeds.
    static func failure<T, E: Error>(of body: () throws(E) -> T) -> E? {
        do { _ = try body(); return nil } catch { return error }
    }

    /// One second of a 440 Hz tone through Opus at 48 kHz and back; the decoded
    /// signal's frequency (zero crossings) and level must match what went in.
    static func opus() throws(Failure) -> String {
        let rate = 48_000, frame = 960
        let encoder = try attempt { () throws(CodecError) in try OpusEncoder(sampleRate: Int32(rate), channels: 1) }
        try attempt { () throws(CodecError) in try encoder.setBitrate(32_000) }
        let decoder = try attempt { () throws(CodecError) in try OpusDecoder(sampleRate: Int32(rate), channels: 1) }
        let amplitude = 8_000.0
        var input = [Int16](repeating: 0, count: frame)
        var output = [Int16](repeating: 0, count: rate)
        var packet = [UInt8](repeating: 0, count: 1500)
        var bytes = 0
        for f in 0..<(rate / frame) {
            for i in 0..<frame {
                let n = Double(f * frame + i)
                input[i] = Int16(saturating: amplitude * sin(2.0 * Double.pi * 440.0 * n / Double(rate)))
            }
            let length = try attempt { () throws(CodecError) -> Int in
                try input.withBuffer { (pcm: UnsafeBufferPointer<Int16>) throws(CodecError) -> Int in
                    try packet.withMutableBytes { (out: UnsafeMutableRawBufferPointer) throws(CodecError) -> Int in try encoder.encode(pcm, into: out) }
                }
            }
            bytes += length
            let decoded = try attempt { () throws(CodecError) -> Int in
                try packet.withBytes { (p: UnsafeRawBufferPointer) throws(CodecError) -> Int in
                    try output.withMutableBuffer { (o: UnsafeMutableBufferPointer<Int16>) throws(CodecError) -> Int in
                        try decoder.decode(UnsafeRawBufferPointer(rebasing: p[0..<length]),
                                           into: UnsafeMutableBufferPointer(rebasing: o[(f * frame)..<((f + 1) * frame)]))
                    }
                }
            }
            guard decoded == frame else { throw Failure("decoded \(decoded) samples, expected \(frame)") }
        }
        // Skip the codec's start-up (its look-ahead and the encoder warming up).
        let tail = Array(output[4_800...])
        let frequency = Double(risingZeroCrossings(tail)) * Double(rate) / Double(tail.count)
        let rms = rootMeanSquare(tail)
        let expected = amplitude / 2.0.squareRoot()
        guard abs(frequency - 440) <= 5 else { throw Failure("decoded tone is \(Int(saturating: frequency)) Hz, expected 440 Hz") }
        guard rms > expected * 0.7, rms < expected * 1.4 else {
            throw Failure("decoded level \(Int(saturating: rms)) RMS, expected about \(Int(saturating: expected))")
        }
        return "\(opusVersion), 440 Hz tone back at \(Int(saturating: frequency.rounded())) Hz, level \(Int(saturating: 100 * rms / expected))%, \(bytes * 8 / 1000) kbit/s"
    }

    /// Protect an RTP packet and unprotect it with the peer's context: the payload comes
    /// back intact; a flipped bit and a replay are both refused.
    static func srtp() throws(Failure) -> String {
        var key = [UInt8](repeating: 0, count: 16), salt = [UInt8](repeating: 0, count: 14)
        for i in 0..<16 { key[i] = UInt8(truncatingIfNeeded: i &* 7 &+ 1) }
        for i in 0..<14 { salt[i] = UInt8(truncatingIfNeeded: i &* 13 &+ 5) }
        let sender = try attempt { () throws(SRTPError) in try SRTPContext(direction: .outbound, masterKey: key, masterSalt: salt) }
        let receiver = try attempt { () throws(SRTPError) in try SRTPContext(direction: .inbound, masterKey: key, masterSalt: salt) }
        // RTP header (RFC 3550 §5.1): V=2, PT 111, seq 0x1234, timestamp, SSRC; 20 payload bytes.
        var plain: [UInt8] = [0x80, 111, 0x12, 0x34, 0, 0, 0x03, 0xC0, 0xDE, 0xAD, 0xBE, 0xEF]
        for i in 0..<20 { plain.append(UInt8(i)) }
        var buffer = plain + [UInt8](repeating: 0, count: SRTPContext.rtpOverhead)
        let protectedLength = try attempt { () throws(SRTPError) -> Int in
            try buffer.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) -> Int in try sender.protectRTP(b, length: plain.count) }
        }
        guard protectedLength == plain.count + 10 else { throw Failure("protected length \(protectedLength)") }
        guard Array(buffer[12..<32]) != Array(plain[12...]) else { throw Failure("payload not encrypted") }
        let wire = Array(buffer[0..<protectedLength])
        func unprotect(_ packet: [UInt8]) throws(SRTPError) -> [UInt8] {
            var copy = packet
            let n = try copy.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) -> Int in try receiver.unprotectRTP(b, length: b.count) }
            return Array(copy[0..<n])
        }
        var tampered = wire
        tampered[20] ^= 0x01
        guard let tamperError = failure(of: { () throws(SRTPError) in try unprotect(tampered) }) else { throw Failure("a tampered packet was accepted") }
        guard tamperError == .authenticationFailed else { throw Failure("tampered packet gave '\(tamperError)', expected an authentication failure") }
        let received = try attempt { () throws(SRTPError) in try unprotect(wire) }
        guard received == plain else { throw Failure("round trip changed the packet") }
        guard let replayError = failure(of: { () throws(SRTPError) in try unprotect(wire) }) else { throw Failure("a replayed packet was accepted") }
        guard replayError == .replay else { throw Failure("replay gave '\(replayError)'") }
        return "\(srtpVersion), AES_CM_128_HMAC_SHA1_80 round trip; tamper and replay refused"
    }

    /// A fresh P-256 key and self-signed certificate; the certificate parses, its
    /// signature verifies, and its fingerprint is the SHA-256 of its DER.
    static func identity() throws(Failure) -> String {
        let random = try attempt { () throws(DTLSError) in try CryptoRandom() }
        let id = try attempt { () throws(DTLSError) in try Identity(random: random) }
        let fp = try attempt { () throws(DTLSError) in try verifySelfSigned(id.certificateDER) }
        guard fp == id.fingerprint, fp.count == 32 else { throw Failure("fingerprint mismatch") }
        // TURN's long-term key is MD5(username:realm:password) (RFC 8489 §9.2.2); a
        // release mbedtls built without MD5 answered every allocation with a 401.
        // Expected value: Python's hashlib.md5(b"linnet:linnet.test:secret").
        let key = STUNMessage.longTermKey(username: "linnet", realm: "linnet.test", password: "secret")
        let hex = key.map { $0 < 16 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
        guard hex.bytesEqual("e00aefeb27a1743b1b9a39d932118386") else { throw Failure("TURN long-term key (MD5) is \(hex)") }
        return "\(mbedtlsVersion), \(id.certificateDER.count)-byte certificate, sha-256 \(String(Substring(id.fingerprintText.utf8.prefix(23))))..., MD5 key for TURN"
    }

    /// ALSA's `null` PCM opened for capture at 48 kHz mono; ten 10 ms periods read.
    static func alsa() throws(Failure) -> String {
        let pcm = try attempt { () throws(ALSAError) in try PCM(device: "null", stream: .capture, rate: 48_000, channels: 1) }
        var buffer = [Int16](repeating: 0, count: 480)
        var frames = 0
        for _ in 0..<10 {
            frames += try attempt { () throws(ALSAError) -> Int in
                try buffer.withMutableBuffer { (b: UnsafeMutableBufferPointer<Int16>) throws(ALSAError) -> Int in try pcm.read(into: b) }
            }
        }
        guard frames == 4_800 else { throw Failure("read \(frames) frames, expected 4800") }
        return "alsa-lib \(alsaVersion), null capture 48 kHz: \(frames) frames"
    }

    static func gpiod() throws(Failure) -> String {
        let v = gpiodVersion
        guard let first = v.utf8.first, first >= 0x30, first <= 0x39 else { throw Failure("libgpiod version '\(v)'") }
        return "libgpiod \(v)"
    }

    /// The monotonic clock moves forward and a poll loop timer fires.
    static func clock() throws(Failure) -> String {
        let loop = try attempt { () throws(SystemError) in try EventLoop() }
        var fired = false
        let start = MonotonicClock.now()
        loop.schedule(after: .milliseconds(2)) { fired = true }
        while !fired { try attempt { () throws(SystemError) in try loop.runOnce() } }
        let elapsed = MonotonicClock.now() - start
        guard elapsed >= .milliseconds(2) else { throw Failure("timer fired after \(elapsed)") }
        return "poll loop timer fired after \(elapsed)"
    }

    static func be32(_ v: UInt32) -> [UInt8] {
        [UInt8(truncatingIfNeeded: v >> 24), UInt8(truncatingIfNeeded: v >> 16), UInt8(truncatingIfNeeded: v >> 8), UInt8(truncatingIfNeeded: v)]
    }

    static func risingZeroCrossings(_ x: [Int16]) -> Int {
        var count = 0
        for i in 1..<x.count where x[i - 1] < 0 && x[i] >= 0 { count += 1 }
        return count
    }

    static func rootMeanSquare(_ x: [Int16]) -> Double {
        var sum = 0.0
        for v in x { sum += Double(v) * Double(v) }
        return (sum / Double(x.count)).squareRoot()
    }
}
