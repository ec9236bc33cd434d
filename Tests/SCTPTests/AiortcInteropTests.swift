import Foundation
import Testing
import Wire
@testable import SCTP

/// Interop with aiortc's SCTP and data channel stack (an independent implementation),
/// SCTP packets exchanged over the bridge's stdio instead of DTLS. Runs only when
/// AIORTC_PYTHON names a Python with aiortc installed
/// (`python3 -m venv v && v/bin/pip install aiortc`). It runs in real time: aiortc's timers
/// read the real clock, so ours does too here (the only such test of this module).
@Suite struct AiortcInteropTests {
    static let python = ProcessInfo.processInfo.environment["AIORTC_PYTHON"]

    @Test(.enabled(if: python != nil)) func dataChannelsWithAiortc() throws {
        let script = FileManager.default.temporaryDirectory.appendingPathComponent("linnet-sctp-bridge-\(getpid()).py")
        try Self.bridge.write(to: script, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: script) }
        let proc = Process()
        proc.executableURL = URL(fileURLWithPath: Self.python!)
        proc.arguments = [script.path]
        let toChild = Pipe(), fromChild = Pipe()
        proc.standardInput = toChild
        proc.standardOutput = fromChild
        try proc.run()
        defer { if proc.isRunning { proc.terminate() } }

        final class Inbox: @unchecked Sendable {
            let lock = NSLock()
            var lines: [String] = []
            var partial = Data()
            let ready = DispatchSemaphore(value: 0)
        }
        let inbox = Inbox()
        fromChild.fileHandleForReading.readabilityHandler = { h in
            let d = h.availableData
            inbox.lock.lock()
            inbox.partial.append(d)
            while let nl = inbox.partial.firstIndex(of: 0x0a) {
                inbox.lines.append(String(decoding: inbox.partial[inbox.partial.startIndex..<nl], as: UTF8.self))
                inbox.partial.removeSubrange(inbox.partial.startIndex...nl)
            }
            inbox.lock.unlock()
            inbox.ready.signal()
        }
        func clock() -> Instant { Instant(nanoseconds: Int64(DispatchTime.now().uptimeNanoseconds)) }
        // Optional seeded loss both ways (AIORTC_LOSS_PERCENT); 15 % passed here.
        let loss = UInt64(ProcessInfo.processInfo.environment["AIORTC_LOSS_PERCENT"] ?? "0") ?? 0
        var lossRng = SeededRandom(seed: 9)
        func send(_ line: String) {
            if line.hasPrefix("P "), lossRng.next() % 100 < loss { return }
            toChild.fileHandleForWriting.write((line + "\n").data(using: .utf8)!) }

        var r = SeededRandom(seed: 1)
        var dc = DataChannels(config: DataChannelConfig(isDTLSClient: true), random: &r)
        dc.connect(now: clock())
        var ours: [DataChannelEvent] = []
        var theirs: [String] = []
        var channel: UInt16?
        let big = payload(3, size: 100_000)
        var sentAll = false
        var closing = false
        let end = clock() + .seconds(90)
        var deadline = Instant.distantFuture
        while clock() < end {
            loop: while true {
                switch dc.pollOutput() {
                case .transmit(let b): send("P " + Hex.encode(b))
                case .event(let e): ours.append(e)
                case .timeout(let t): deadline = t; break loop
                }
            }
            if channel == nil, ours.contains(.connected) {
                channel = try dc.open(label: "oai-events", now: clock())
                continue
            }
            if let c = channel, !sentAll, ours.contains(.opened(channel: c, label: "oai-events", protocolName: "")) {
                try dc.send(c, text: "hi", now: clock())
                try dc.send(c, binary: big, now: clock())
                try dc.send(c, text: "", now: clock())
                try dc.send(c, binary: [], now: clock())
                sentAll = true
                continue
            }
            if let c = channel, sentAll, !closing, messages(ours, channel: c).count == 4 {
                try dc.close(c, now: clock())
                closing = true
                continue
            }
            if let c = channel, ours.contains(.closed(channel: c)), theirs.contains(where: { $0.hasPrefix("closed") }) { break }
            let wait = max(0, min((deadline - clock()).nanoseconds, 50_000_000))
            _ = inbox.ready.wait(timeout: .now() + .nanoseconds(Int(wait)))
            inbox.lock.lock()
            let lines = inbox.lines
            inbox.lines.removeAll()
            inbox.lock.unlock()
            for l in lines {
                if l.hasPrefix("P "), lossRng.next() % 100 >= loss, let bytes = Hex.decode(String(l.dropFirst(2))) {
                    dc.handleInput(bytes, now: clock())
                } else if l.hasPrefix("E ") {
                    theirs.append(String(l.dropFirst(2)))
                }
            }
            if clock() >= deadline { dc.handleTimeout(now: clock()) }
        }
        print("aiortc events:", theirs, "ours:", ours.map { e -> String in if case .message(let c, let d, let t) = e { return "msg(\(c),\(d.count),\(t))" }; return "\(e)" })
        send("STOP")
        proc.waitUntilExit()
        guard let c = channel else { Issue.record("never connected: \(ours) \(theirs)"); return }
        #expect(theirs.contains("open \(c) oai-events"))
        let echoed = messages(ours, channel: c)
        #expect(echoed.map { $0.data } == [Array("hi".utf8), big, [], []])
        #expect(echoed.map { $0.isText } == [true, false, true, false])
        #expect(theirs.contains("message \(c) binary 100000"))
        // aiortc (DTLS server) opened an odd channel and sent on it.
        #expect(ours.contains(.opened(channel: 1, label: "from-aiortc", protocolName: "")))
        #expect(messages(ours, channel: 1).first?.data == Array("hello from aiortc".utf8))
        #expect(ours.contains(.closed(channel: c)) && theirs.contains("closed \(c)"))
        #expect(dc.association.stats.droppedMalformed == 0 && dc.association.stats.droppedBadTag == 0)
    }

    static let bridge = #"""
import asyncio, sys, binascii
from aiortc.rtcsctptransport import RTCSctpTransport
from aiortc.rtcdatachannel import RTCDataChannel, RTCDataChannelParameters

class FakeDtls:
    """Stands in for RTCDtlsTransport: SCTP packets travel as hex lines on stdio."""
    state = "connected"
    _role = "server"
    def __init__(self):
        self._data_receiver = None
    def _register_data_receiver(self, r): self._data_receiver = r
    def _unregister_data_receiver(self, r): self._data_receiver = None
    async def _send_data(self, data):
        sys.stdout.write("P " + binascii.hexlify(data).decode() + "\n"); sys.stdout.flush()

def say(*a):
    sys.stdout.write("E " + " ".join(str(x) for x in a) + "\n"); sys.stdout.flush()

async def main():
    dtls = FakeDtls()
    sctp = RTCSctpTransport(dtls)
    @sctp.on("datachannel")
    def on_channel(ch):
        say("open", ch.id, ch.label)
        @ch.on("message")
        def on_message(m):
            say("message", ch.id, "text" if isinstance(m, str) else "binary", len(m))
            ch.send(m)  # echo
        @ch.on("close")
        def on_close():
            say("closed", ch.id)
        mine = RTCDataChannel(sctp, RTCDataChannelParameters(label="from-aiortc"))
        @mine.on("open")
        def on_open():
            mine.send("hello from aiortc")
            say("sent", mine.id)
    await sctp.start(sctp.getCapabilities(), 5000)
    loop = asyncio.get_event_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            break
        line = line.decode().strip()
        if line == "STOP":
            break
        if line.startswith("P "):
            await sctp._handle_data(binascii.unhexlify(line[2:]))
    say("state", sctp._association_state.name)
    await sctp.stop()

asyncio.run(main())
"""#
}
