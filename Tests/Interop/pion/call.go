// One WebRTC call on pion and what is written down about it.
//
// Both modes (answer and offer) build their peer connection here, so the loopback-only
// gathering, the report fields and the way audio and data-channel messages are counted
// are the same whichever side pion is on.
package main

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/pion/dtls/v2"
	"github.com/pion/ice/v2"
	"github.com/pion/interceptor"
	"github.com/pion/logging"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v3"
)

const textSampleChars = 200 // texts are truncated to this in the report

// StateEntry is one state change of the connection, with seconds since the call began.
type StateEntry struct {
	Kind  string  `json:"kind"`
	State string  `json:"state"`
	T     float64 `json:"t"`
}

// Message is one data-channel message received (or one echo check in offer mode).
type Message struct {
	T      float64 `json:"t"`
	Text   bool    `json:"text"`
	Size   int     `json:"size"`
	Sample string  `json:"sample,omitempty"`
}

// ChannelReport describes one data channel of the call.
type ChannelReport struct {
	Label          string    `json:"label"`
	StreamID       int       `json:"stream_id"`
	OpenedBy       string    `json:"opened_by"` // "remote" or "pion"
	OpenedAt       float64   `json:"opened_at"`
	ClosedAt       float64   `json:"closed_at,omitempty"`
	Received       []Message `json:"messages_received"`
	SentSizes      []int     `json:"sent_sizes"`
	SendErrors     []string  `json:"send_errors,omitempty"`
	ReceivedCount  int       `json:"received_count"`
	ReceivedBytes  int       `json:"received_bytes"`
	ReceivedTexts  int       `json:"received_texts"`
	ReceivedBinary int       `json:"received_binary"`
}

// Call is one peer connection and its report. Every field is guarded by Peer.mu.
type Call struct {
	ID        string  `json:"id"`
	Route     string  `json:"route"` // whip, backend, offer
	ChatID    string  `json:"chat_id,omitempty"`
	EndReason string  `json:"end_reason,omitempty"`
	Seconds   float64 `json:"call_seconds"`

	States          []StateEntry `json:"states"`
	ConnectionState string       `json:"connection_state"`
	EverConnected   bool         `json:"ever_connected"`

	// a=setup as the offer arrived, as applied to pion (after --offer-setup), and in
	// the answer; in offer mode the offer is pion's own (after --setup).
	OfferSetup        string `json:"offer_setup"`
	OfferSetupApplied string `json:"offer_setup_applied"`
	AnswerSetup       string `json:"answer_setup"`
	// pion's DTLS role: as its handshake started (see roleSpy; known even if the
	// handshake never completes), as its DTLS connection has it once connected (pion
	// internals, the pinned 3.1.56), and as the parity of the stream id of pion's own
	// data channel (RFC 8832 §6: the DTLS client uses even ids); "" when unknown.
	DTLSRole           string `json:"dtls_role"`
	DTLSRoleConnected  string `json:"dtls_role_connected"`
	DTLSRoleByStreamID string `json:"dtls_role_by_stream_id"`
	SRTPProfile        string `json:"srtp_profile"`
	RemoteCertificate  string `json:"remote_certificate,omitempty"`
	SelectedPair       string `json:"selected_pair,omitempty"`
	LocalCandidates    int    `json:"local_candidates"`

	RTPPacketsReceived int      `json:"rtp_packets_received"`
	RTPBytesReceived   int      `json:"rtp_bytes_received"`
	RTPPacketsSent     int      `json:"rtp_packets_sent"`
	RTPBytesSent       int      `json:"rtp_bytes_sent"`
	RTPPayloadTypes    []int    `json:"rtp_payload_types_received"`
	RTPSSRCs           []uint32 `json:"rtp_ssrcs_received"`
	RecordedPackets    int      `json:"recorded_packets"`
	RecordSkipped      int      `json:"record_skipped_packets"`

	DataChannels      []*ChannelReport `json:"data_channels"`
	DataChannelLabels []string         `json:"data_channel_labels"`

	// Offer mode: the messages pion sent on pion-events and whether each came back.
	Echoes *EchoReport `json:"echoes,omitempty"`

	OfferSDP  string `json:"offer_sdp"`
	AnswerSDP string `json:"answer_sdp"`

	start     time.Time
	connected time.Time
	ended     bool
	done      chan struct{} // closed when the call ends
	pc        *webrtc.PeerConnection
	peer      *Peer
}

// EchoReport: offer mode's check of the data-channel echo.
type EchoReport struct {
	Sent       []Message `json:"sent"`
	Matched    int       `json:"matched"`
	Mismatched []string  `json:"mismatched"`
	Complete   bool      `json:"complete"`
}

func (c *Call) since() float64 { return time.Since(c.start).Seconds() }

func (c *Call) state(kind, state string) {
	c.peer.mu.Lock()
	defer c.peer.mu.Unlock()
	c.States = append(c.States, StateEntry{kind, state, round3(c.since())})
	if kind == "connection" {
		c.ConnectionState = state
	}
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

func truncate(s string) string {
	if len(s) <= textSampleChars {
		return s
	}
	return fmt.Sprintf("%s...(+%d chars)", s[:textSampleChars], len(s)-textSampleChars)
}

// newAPI makes a pion API that gathers host candidates only on loopback when
// `loopback` is set (no mDNS, no STUN: no packet leaves the machine), with Opus only
// and pion's default interceptors (RTCP reports, NACK).
func newAPI(loopback bool, answerRole webrtc.DTLSRole, logLevel logging.LogLevel, onDTLSRole func(string)) (*webrtc.API, error) {
	var s webrtc.SettingEngine
	if loopback {
		s.SetIncludeLoopbackCandidate(true)
		s.SetInterfaceFilter(func(name string) bool { return name == "lo" })
		s.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
		s.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	}
	s.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	if answerRole != webrtc.DTLSRoleAuto {
		if err := s.SetAnsweringDTLSRole(answerRole); err != nil {
			return nil, err
		}
	}
	factory := logging.NewDefaultLoggerFactory()
	factory.DefaultLogLevel = logLevel
	factory.Writer = os.Stderr // pion logs to stdout by default; stdout carries only READY
	s.LoggerFactory = &roleSpy{factory, onDTLSRole}

	m := &webrtc.MediaEngine{}
	if err := m.RegisterCodec(webrtc.RTPCodecParameters{
		RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1"},
		PayloadType:        111,
	}, webrtc.RTPCodecTypeAudio); err != nil {
		return nil, err
	}
	i := &interceptor.Registry{}
	if err := webrtc.RegisterDefaultInterceptors(m, i); err != nil {
		return nil, err
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(s), webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(i)), nil
}

// roleSpy hands out pion's loggers and, for pion/dtls, one that notices the role the
// handshake runs in: pion/dtls traces every flight as "[handshake:client|server] …"
// (its handshaker.go) from the first one on, so the role is known even when the
// handshake never completes (both sides waiting as servers), which no public API tells.
type roleSpy struct {
	logging.LoggerFactory
	onRole func(string)
}

func (f *roleSpy) NewLogger(scope string) logging.LeveledLogger {
	l := f.LoggerFactory.NewLogger(scope)
	if scope == "dtls" && f.onRole != nil {
		return &roleLogger{l, f.onRole}
	}
	return l
}

type roleLogger struct {
	logging.LeveledLogger
	onRole func(string)
}

func (l *roleLogger) Tracef(format string, args ...interface{}) {
	if strings.HasPrefix(format, "[handshake:%s]") && len(args) > 0 {
		if role, ok := args[0].(string); ok {
			l.onRole(role)
		}
	}
	l.LeveledLogger.Tracef(format, args...)
}

// onDTLSRole records the role the DTLS handshake started in (once).
func (c *Call) onDTLSRole(role string) {
	c.peer.mu.Lock()
	defer c.peer.mu.Unlock()
	if c.DTLSRole == "" {
		c.DTLSRole = role
		log.Printf("call %s: DTLS handshake as %s", c.ID, role)
		if c.Route != "offer" {
			// answer mode: a line on stdout a harness can wait for (see main.go).
			fmt.Printf("DTLS %s %s\n", c.ID, role)
		}
	}
}

// setupOf returns the first a=setup value of an SDP ("" when there is none).
func setupOf(sdp string) string {
	for _, line := range strings.Split(sdp, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.HasPrefix(line, "a=setup:") {
			return strings.TrimPrefix(line, "a=setup:")
		}
	}
	return ""
}

// withSetup rewrites every a=setup line of an SDP to `role` ("keep": unchanged).
func withSetup(sdp, role string) string {
	if role == "" || role == "keep" {
		return sdp
	}
	lines := strings.Split(sdp, "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "a=setup:") {
			cr := ""
			if strings.HasSuffix(line, "\r") {
				cr = "\r"
			}
			lines[i] = "a=setup:" + role + cr
		}
	}
	return strings.Join(lines, "\n")
}

// watch records the call's state changes and, once connected, what DTLS negotiated.
func (c *Call) watch(onConnected func()) {
	pc := c.pc
	pc.OnSignalingStateChange(func(s webrtc.SignalingState) { c.state("signaling", s.String()) })
	pc.OnICEGatheringStateChange(func(s webrtc.ICEGathererState) { c.state("ice_gathering", s.String()) })
	pc.OnICEConnectionStateChange(func(s webrtc.ICEConnectionState) { c.state("ice_connection", s.String()) })
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		c.state("connection", s.String())
		switch s {
		case webrtc.PeerConnectionStateConnected:
			c.learnTransport()
			c.peer.mu.Lock()
			first := !c.EverConnected
			c.EverConnected = true
			c.connected = time.Now()
			c.peer.mu.Unlock()
			if first {
				// For tests that must not end the call before pion has seen it connect
				// (its state lags the other end's by a flight when pion is the DTLS client).
				fmt.Printf("CONNECTED %s\n", c.ID)
			}
			if first && onConnected != nil {
				onConnected()
			}
		case webrtc.PeerConnectionStateFailed:
			go c.peer.endCall(c, "connection failed")
		case webrtc.PeerConnectionStateClosed:
			go c.peer.endCall(c, "connection closed")
		}
	})
}

// dtlsTransport is the call's DTLS transport (BUNDLE: one for everything).
func (c *Call) dtlsTransport() *webrtc.DTLSTransport {
	for _, s := range c.pc.GetSenders() {
		if t := s.Transport(); t != nil {
			return t
		}
	}
	if sctp := c.pc.SCTP(); sctp != nil {
		return sctp.Transport()
	}
	return nil
}

// learnTransport reads what pion's public API does not expose: the DTLS role its
// dtls.Conn took and the SRTP protection profile (unexported fields of the pinned
// pion 3.1.56 and pion/dtls v2, read-only), the peer's certificate and the selected
// candidate pair.
func (c *Call) learnTransport() {
	t := c.dtlsTransport()
	if t == nil {
		return
	}
	role, profile := "", ""
	v := reflect.ValueOf(t).Elem()
	if f := v.FieldByName("srtpProtectionProfile"); f.IsValid() {
		profile = srtpProfileName(uint16(f.Uint()))
	}
	if f := v.FieldByName("conn"); f.IsValid() && !f.IsNil() {
		conn := (*dtls.Conn)(unsafe.Pointer(f.Pointer()))
		st := conn.ConnectionState()
		if isClient := reflect.ValueOf(&st).Elem().FieldByName("isClient"); isClient.IsValid() {
			if isClient.Bool() {
				role = "client"
			} else {
				role = "server"
			}
		}
	}
	certificate := ""
	if der := t.GetRemoteCertificate(); len(der) > 0 {
		if cert, err := x509.ParseCertificate(der); err == nil {
			switch k := cert.PublicKey.(type) {
			case *ecdsa.PublicKey:
				certificate = "ECDSA " + k.Curve.Params().Name
			case *rsa.PublicKey:
				certificate = fmt.Sprintf("RSA %d", k.N.BitLen())
			default:
				certificate = cert.PublicKeyAlgorithm.String()
			}
		}
	}
	pair := ""
	if p, err := t.ICETransport().GetSelectedCandidatePair(); err == nil && p != nil {
		pair = fmt.Sprintf("%s:%d -> %s:%d", p.Local.Address, p.Local.Port, p.Remote.Address, p.Remote.Port)
	}
	c.peer.mu.Lock()
	c.DTLSRoleConnected, c.SRTPProfile, c.RemoteCertificate, c.SelectedPair = role, profile, certificate, pair
	c.peer.mu.Unlock()
}

func srtpProfileName(p uint16) string {
	switch p {
	case 0x0001:
		return "SRTP_AES128_CM_SHA1_80"
	case 0x0002:
		return "SRTP_AES128_CM_SHA1_32"
	case 0x0007:
		return "SRTP_AEAD_AES_128_GCM"
	case 0x0008:
		return "SRTP_AEAD_AES_256_GCM"
	case 0:
		return ""
	}
	return fmt.Sprintf("0x%04x", p)
}

// receiveAudio reads the remote track until it ends: counts, records, and hands each
// packet to `forward` (echo mode) when given.
func (c *Call) receiveAudio(track *webrtc.TrackRemote, forward func(*rtp.Packet)) {
	stamp := &trackStamp{}
	for {
		pkt, _, err := track.ReadRTP()
		if err != nil {
			return
		}
		p := c.peer
		p.mu.Lock()
		c.RTPPacketsReceived++
		c.RTPBytesReceived += len(pkt.Payload)
		if !containsInt(c.RTPPayloadTypes, int(pkt.PayloadType)) {
			c.RTPPayloadTypes = append(c.RTPPayloadTypes, int(pkt.PayloadType))
		}
		if !containsU32(c.RTPSSRCs, pkt.SSRC) {
			c.RTPSSRCs = append(c.RTPSSRCs, pkt.SSRC)
		}
		p.mu.Unlock()
		if p.recorder != nil {
			ok := p.recorder.write(stamp, pkt)
			p.mu.Lock()
			if ok {
				c.RecordedPackets++
			} else {
				c.RecordSkipped++
			}
			p.mu.Unlock()
		}
		if forward != nil {
			forward(pkt)
		}
	}
}

func (c *Call) sent(bytes int) {
	c.peer.mu.Lock()
	c.RTPPacketsSent++
	c.RTPBytesSent += bytes
	c.peer.mu.Unlock()
}

// isConnected: media written before DTLS-SRTP is up goes nowhere; only count the rest.
func (c *Call) isConnected() bool {
	c.peer.mu.Lock()
	defer c.peer.mu.Unlock()
	return c.ConnectionState == "connected"
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func containsU32(xs []uint32, x uint32) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// channel adds a data channel to the report and counts what arrives on it; `onMessage`
// (may be nil) runs after the message is written down.
func (c *Call) channel(dc *webrtc.DataChannel, openedBy string, onOpen func(*ChannelReport), onMessage func(*ChannelReport, webrtc.DataChannelMessage)) *ChannelReport {
	r := &ChannelReport{Label: dc.Label(), StreamID: -1, OpenedBy: openedBy, Received: []Message{}, SentSizes: []int{}}
	p := c.peer
	p.mu.Lock()
	c.DataChannels = append(c.DataChannels, r)
	c.DataChannelLabels = append(c.DataChannelLabels, dc.Label())
	p.mu.Unlock()
	dc.OnOpen(func() {
		p.mu.Lock()
		r.OpenedAt = round3(c.since())
		if id := dc.ID(); id != nil {
			r.StreamID = int(*id)
			if openedBy == "pion" {
				// RFC 8832 §6: the DTLS client picks even stream ids, the server odd.
				if *id%2 == 0 {
					c.DTLSRoleByStreamID = "client"
				} else {
					c.DTLSRoleByStreamID = "server"
				}
			}
		}
		p.mu.Unlock()
		if onOpen != nil {
			onOpen(r)
		}
	})
	dc.OnClose(func() {
		p.mu.Lock()
		r.ClosedAt = round3(c.since())
		p.mu.Unlock()
	})
	dc.OnMessage(func(m webrtc.DataChannelMessage) {
		p.mu.Lock()
		msg := Message{T: round3(c.since()), Text: m.IsString, Size: len(m.Data)}
		if m.IsString {
			msg.Sample = truncate(string(m.Data))
			r.ReceivedTexts++
		} else {
			r.ReceivedBinary++
		}
		r.ReceivedCount++
		r.ReceivedBytes += len(m.Data)
		if len(r.Received) < 1000 {
			r.Received = append(r.Received, msg)
		}
		p.mu.Unlock()
		if onMessage != nil {
			onMessage(r, m)
		}
	})
	return r
}

// send sends one message on a channel and writes down its size or the error.
func (c *Call) send(dc *webrtc.DataChannel, r *ChannelReport, data []byte, text bool) {
	var err error
	if text {
		err = dc.SendText(string(data))
	} else {
		err = dc.Send(data)
	}
	c.peer.mu.Lock()
	if err != nil {
		r.SendErrors = append(r.SendErrors, err.Error())
	} else {
		r.SentSizes = append(r.SentSizes, len(data))
	}
	c.peer.mu.Unlock()
}

// helloMessage is what pion sends first on its own channel.
func helloMessage(mode string) []byte {
	b, _ := json.Marshal(map[string]string{"type": "hello", "peer": "pion", "mode": mode})
	return b
}

// writeJSON writes `v` to `path` atomically (a temporary file, then rename).
func writeJSON(path string, v interface{}) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
