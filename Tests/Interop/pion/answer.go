// `answer`: pion behind an HTTP server on loopback, answering offers on the WHIP and
// app-backend routes the way a provider would (after gathering, no trickle).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/pion/logging"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v3"
)

type answerOptions struct {
	mode        string // echo or tone
	offerSetup  string // keep, actpass, active, passive
	answerSetup string // pion (its own choice), active, passive
	ogg         string
	peerChannel bool
	logLevel    logging.LogLevel
}

type answerer struct {
	peer     *Peer
	opts     answerOptions
	role     webrtc.DTLSRole // what --answer-setup asks SettingEngine for
	loopback bool
	toneData []oggPacket
}

func newAnswerer(p *Peer, opts answerOptions, loopback bool) (*answerer, error) {
	role := webrtc.DTLSRoleAuto
	switch opts.answerSetup {
	case "active":
		role = webrtc.DTLSRoleClient
	case "passive":
		role = webrtc.DTLSRoleServer
	}
	a := &answerer{peer: p, opts: opts, role: role, loopback: loopback}
	if opts.mode == "tone" {
		var err error
		if a.toneData, err = readOgg(opts.ogg); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// statusWriter keeps the status of a response for the report.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) {
	w.status = s
	w.ResponseWriter.WriteHeader(s)
}

func (a *answerer) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &statusWriter{rw, 200}
	defer func() { a.peer.http(r.Method, r.URL.Path, w.status) }()
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == "POST" && len(parts) == 1 && parts[0] == "whip":
		if !strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/sdp") {
			http.Error(w, "WHIP offers are application/sdp", http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c, answer, err := a.answer("whip", "", string(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/sdp")
		w.Header().Set("Location", "/whip/"+c.ID)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, answer)
	case r.Method == "DELETE" && len(parts) == 2 && parts[0] == "whip":
		c := a.find(parts[1])
		if c == nil {
			http.Error(w, "no such call", http.StatusNotFound)
			return
		}
		a.peer.endCall(c, "whip delete") // the report is written before the response
		w.WriteHeader(http.StatusOK)
	case r.Method == "PATCH" && len(parts) == 2 && parts[0] == "whip":
		http.Error(w, "no ICE restart here", http.StatusMethodNotAllowed)
	case r.Method == "POST" && len(parts) == 2 && parts[0] == "voice":
		var req struct {
			SDP string `json:"sdp"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.SDP == "" {
			jsonError(w, http.StatusBadRequest, "expected a JSON body {\"sdp\": offer}")
			return
		}
		c, answer, err := a.answer("backend", parts[1], req.SDP)
		if err != nil {
			jsonError(w, http.StatusBadRequest, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"id": c.ID, "sdp": answer})
	case r.Method == "POST" && len(parts) == 4 && parts[0] == "voice" && parts[3] == "close":
		c := a.find(parts[2])
		if c == nil {
			jsonError(w, http.StatusNotFound, "no such voice")
			return
		}
		seconds := a.peer.endCall(c, "backend close")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]float64{"seconds": seconds})
	default:
		http.Error(w, "not a WHIP or voice route", http.StatusNotFound)
	}
}

func jsonError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": message})
}

func (a *answerer) find(id string) *Call {
	a.peer.mu.Lock()
	defer a.peer.mu.Unlock()
	return a.peer.calls[id]
}

// answer applies an offer (its a=setup rewritten per --offer-setup), waits for
// gathering to finish and returns the answer with its candidates.
func (a *answerer) answer(route, chat, offer string) (*Call, string, error) {
	c := a.peer.newCall(route, chat)
	applied := withSetup(offer, a.opts.offerSetup)
	a.peer.mu.Lock()
	c.OfferSDP, c.OfferSetup, c.OfferSetupApplied = offer, setupOf(offer), setupOf(applied)
	a.peer.mu.Unlock()
	fail := func(err error) (*Call, string, error) {
		log.Printf("call %s: refused the offer: %v", c.ID, err)
		a.peer.endCall(c, "offer refused: "+err.Error())
		return nil, "", err
	}
	// An API per call: its logger factory knows the call (see roleSpy).
	api, err := newAPI(a.loopback, a.role, a.opts.logLevel, c.onDTLSRole)
	if err != nil {
		return fail(err)
	}
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return fail(err)
	}
	c.pc = pc
	var tone *webrtc.TrackLocalStaticSample
	var echo *webrtc.TrackLocalStaticRTP
	c.watch(func() {
		if a.opts.peerChannel {
			a.openPeerChannel(c)
		}
		if tone != nil {
			go playOgg(c, tone, a.toneData, c.done)
		}
	})
	pc.OnDataChannel(func(dc *webrtc.DataChannel) {
		c.channel(dc, "remote", nil, func(r *ChannelReport, m webrtc.DataChannelMessage) {
			if a.opts.mode == "echo" {
				c.send(dc, r, m.Data, m.IsString) // text as text, binary as binary
			}
		})
	})
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: applied}); err != nil {
		return fail(err)
	}
	capability := webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}
	var local webrtc.TrackLocal
	if a.opts.mode == "echo" {
		if echo, err = webrtc.NewTrackLocalStaticRTP(capability, "audio", "pion-echo"); err != nil {
			return fail(err)
		}
		local = echo
	} else {
		if tone, err = webrtc.NewTrackLocalStaticSample(capability, "audio", "pion-tone"); err != nil {
			return fail(err)
		}
		local = tone
	}
	sender, err := pc.AddTrack(local)
	if err != nil {
		return fail(err)
	}
	go drainRTCP(sender)
	pc.OnTrack(func(track *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		if track.Kind() != webrtc.RTPCodecTypeAudio {
			return
		}
		var forward func(*rtp.Packet)
		if echo != nil {
			forward = echoer(c, echo)
		}
		c.receiveAudio(track, forward)
	})
	answer, err := pc.CreateAnswer(nil)
	if err != nil {
		return fail(err)
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(answer); err != nil {
		return fail(err)
	}
	select {
	case <-gathered:
	case <-time.After(5 * time.Second):
		return fail(errors.New("ICE gathering did not complete in 5 s"))
	}
	sdp := pc.LocalDescription().SDP
	a.peer.mu.Lock()
	c.AnswerSDP, c.AnswerSetup = sdp, setupOf(sdp)
	c.LocalCandidates = strings.Count(sdp, "a=candidate:")
	a.peer.mu.Unlock()
	log.Printf("call %s (%s): offer setup %s (applied %s), answer setup %s", c.ID, route, c.OfferSetup, c.OfferSetupApplied, c.AnswerSetup)
	// One line per answer on stdout, after READY, so that a harness can wait for it.
	fmt.Printf("ANSWERED %s offer=%s applied=%s answer=%s\n", c.ID, c.OfferSetup, c.OfferSetupApplied, c.AnswerSetup)
	return c, sdp, nil
}

// echoer returns the echo of received RTP: the same payloads and marker, on pion's
// own stream (its SSRC and payload type come from the track's binding), sequence
// numbers counted afresh and timestamps shifted to a base of its own.
func echoer(c *Call, track *webrtc.TrackLocalStaticRTP) func(*rtp.Packet) {
	seq := uint16(rand.Uint32())
	base := rand.Uint32()
	var first uint32
	started := false
	return func(in *rtp.Packet) {
		if !started {
			first, started = in.Timestamp, true
		}
		out := &rtp.Packet{Header: rtp.Header{Version: 2, Marker: in.Marker, SequenceNumber: seq, Timestamp: base + (in.Timestamp - first)},
			Payload: in.Payload}
		seq++
		if err := track.WriteRTP(out); err == nil && c.isConnected() {
			c.sent(len(in.Payload))
		}
	}
}

// drainRTCP reads the sender's RTCP so pion's interceptors see the receiver reports.
func drainRTCP(sender *webrtc.RTPSender) {
	buf := make([]byte, 1500)
	for {
		if _, _, err := sender.Read(buf); err != nil {
			return
		}
	}
}

// openPeerChannel opens pion's own channel once connected and says hello on it.
func (a *answerer) openPeerChannel(c *Call) {
	dc, err := c.pc.CreateDataChannel("peer-events", nil)
	if err != nil {
		log.Printf("call %s: peer-events: %v", c.ID, err)
		return
	}
	c.channel(dc, "pion", func(r *ChannelReport) { c.send(dc, r, helloMessage(a.opts.mode), true) }, nil)
}

// serveAnswer listens and serves in the background; the caller prints READY.
func serveAnswer(a *answerer, listen string) (net.Listener, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", listen, err)
	}
	go func() { _ = http.Serve(l, a) }()
	return l, nil
}
