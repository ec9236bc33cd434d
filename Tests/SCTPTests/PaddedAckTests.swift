import Testing
import Wire
@testable import SCTP

@Suite struct PaddedAckTests {
    /// pion/datachannel sends DATA_CHANNEL_ACK as 4 bytes (02 00 00 00), where RFC 8832
    /// §5.2 has only the type byte: the channel we opened must open all the same
    /// (before, such an ACK was dropped and the channel never opened against pion).
    @Test func paddedAckOpensOurChannel() throws {
        var p = makeChannels(seed: 11)
        let connected = p.run(for: .seconds(5), until: bothConnected)
        #expect(connected)
        let id = try p.a.open(label: "oai-events", now: p.now)
        p.a.receive(SCTPMessage(streamID: id, ppid: DataChannelPPID.dcep, unordered: false, data: [0x02, 0, 0, 0]))
        var opened = false
        drain: while true {
            switch p.a.poll() {
            case .event(let e): if e == .opened(channel: id, label: "oai-events", protocolName: "") { opened = true }
            case .transmit: continue
            case .timeout: break drain
            }
        }
        #expect(opened)
        #expect(p.a.droppedMessages == 0)
    }
}
