// `offer`: pion as the offerer and WHIP client, towards `linnet answer`.
package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pion/logging"
	"github.com/pion/webrtc/v3"
)

type offerOptions struct {
	url      string
	setup    string // keep (pion's own actpass), actpass, active, passive
	ogg      string
	seconds  float64
	logLevel logging.LogLevel
}

// echoProbe is one message sent on pion-events whose echo is expected back.
type echoProbe struct {
	data []byte
	text bool
}

// echoProbes: a short text, a JSON text, a text larger than one SCTP packet (4000
// bytes: at pion's 1200 payload bytes a chunk it goes as four DATA chunks, B…E fragments, and its
// echo is reassembled), a binary message and another short text after it (order).
func echoProbes() []echoProbe {
	big := make([]byte, 4000)
	for i := range big {
		big[i] = "0123456789abcdefghijklmnopqrstuvwxyz"[i%36]
	}
	copy(big, "big:")
	return []echoProbe{
		{[]byte("hello from pion"), true},
		{[]byte(`{"type":"ping","n":1}`), true},
		{big, true},
		{[]byte{0, 1, 2, 253, 254, 255}, false},
		{[]byte("last"), true},
	}
}

// runOffer makes one call and returns the failures (none: success).
func runOffer(p *Peer, opts offerOptions) []string {
	target, err := url.Parse(opts.url)
	if err != nil || target.Host == "" {
		return []string{fmt.Sprintf("--url %q is not a URL", opts.url)}
	}
	host := target.Hostname()
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	var packets []oggPacket
	if opts.ogg != "" {
		if packets, err = readOgg(opts.ogg); err != nil {
			return []string{err.Error()}
		}
	}
	c := p.newCall("offer", "")
	api, err := newAPI(loopback, webrtc.DTLSRoleAuto, opts.logLevel, c.onDTLSRole)
	if err != nil {
		return []string{err.Error()}
	}
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return []string{err.Error()}
	}
	c.pc = pc
	connected := make(chan struct{})
	c.watch(func() { close(connected) })

	track, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "audio", "pion-offer")
	if err != nil {
		return []string{err.Error()}
	}
	sender, err := pc.AddTrack(track)
	if err != nil {
		return []string{err.Error()}
	}
	go drainRTCP(sender)
	pc.OnTrack(func(t *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		if t.Kind() == webrtc.RTPCodecTypeAudio {
			c.receiveAudio(t, nil)
		}
	})

	// The channel and its echo check: every probe must come back, in order, typed
	// as sent and byte for byte.
	probes := echoProbes()
	echoes := &EchoReport{Sent: []Message{}, Mismatched: []string{}}
	p.mu.Lock()
	c.Echoes = echoes
	p.mu.Unlock()
	allEchoed := make(chan struct{})
	received := 0
	dc, err := pc.CreateDataChannel("pion-events", nil)
	if err != nil {
		return []string{err.Error()}
	}
	c.channel(dc, "pion", func(r *ChannelReport) {
		for _, probe := range probes {
			c.send(dc, r, probe.data, probe.text)
			p.mu.Lock()
			echoes.Sent = append(echoes.Sent, Message{T: round3(c.since()), Text: probe.text, Size: len(probe.data), Sample: truncate(string(probe.data))})
			p.mu.Unlock()
		}
	}, func(r *ChannelReport, m webrtc.DataChannelMessage) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if received >= len(probes) {
			echoes.Mismatched = append(echoes.Mismatched, fmt.Sprintf("unexpected message %d (%d bytes)", received+1, len(m.Data)))
			return
		}
		want := probes[received]
		received++
		if want.text == m.IsString && bytes.Equal(want.data, m.Data) {
			echoes.Matched++
		} else {
			echoes.Mismatched = append(echoes.Mismatched, fmt.Sprintf("message %d: sent %d bytes (text %v), got %d bytes (text %v)",
				received, len(want.data), want.text, len(m.Data), m.IsString))
		}
		if received == len(probes) {
			echoes.Complete = true
			close(allEchoed)
		}
	})

	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return []string{err.Error()}
	}
	own := setupOf(offer.SDP)
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return []string{"SetLocalDescription: " + err.Error()}
	}
	select {
	case <-gathered:
	case <-time.After(5 * time.Second):
		return []string{"ICE gathering did not complete in 5 s"}
	}
	// pion refuses a changed SDP in SetLocalDescription ("new sdp does not match
	// previous offer"), so --setup rewrites only what is sent. pion's DTLS role follows
	// the answer's explicit a=setup, so both sides still agree.
	sdp := withSetup(pc.LocalDescription().SDP, opts.setup)
	p.mu.Lock()
	c.OfferSDP, c.OfferSetup, c.OfferSetupApplied = sdp, own, setupOf(sdp)
	c.LocalCandidates = strings.Count(sdp, "a=candidate:")
	p.mu.Unlock()

	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post(opts.url, "application/sdp", strings.NewReader(sdp))
	if err != nil {
		return []string{"POST " + opts.url + ": " + err.Error()}
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p.http("POST", target.Path, resp.StatusCode)
	if resp.StatusCode != http.StatusCreated {
		return []string{fmt.Sprintf("POST %s: %d %s", opts.url, resp.StatusCode, strings.TrimSpace(string(body)))}
	}
	location, err := target.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return []string{"the 201 has no usable Location"}
	}
	answer := string(body)
	p.mu.Lock()
	c.AnswerSDP, c.AnswerSetup = answer, setupOf(answer)
	p.mu.Unlock()
	log.Printf("offer setup %s (sent %s), answer setup %s", own, setupOf(sdp), setupOf(answer))
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		return []string{"SetRemoteDescription: " + err.Error()}
	}

	var failures []string
	select {
	case <-connected:
		if len(packets) > 0 {
			go playOgg(c, track, packets, c.done)
		}
		// The call lasts --seconds from connected; the echoes are awaited within it.
		end := time.After(time.Duration(opts.seconds * float64(time.Second)))
		select {
		case <-allEchoed:
			<-end
		case <-end:
		}
	case <-time.After(15 * time.Second):
		failures = append(failures, "not connected within 15 s")
	}

	req, _ := http.NewRequest(http.MethodDelete, location.String(), nil)
	if resp, err := client.Do(req); err != nil {
		failures = append(failures, "DELETE: "+err.Error())
	} else {
		resp.Body.Close()
		p.http("DELETE", location.Path, resp.StatusCode)
		if resp.StatusCode != http.StatusOK {
			failures = append(failures, fmt.Sprintf("DELETE answered %d", resp.StatusCode))
		}
	}
	p.endCall(c, "whip delete")

	p.mu.Lock()
	defer p.mu.Unlock()
	if !c.EverConnected {
		failures = append(failures, "never connected")
	}
	if !echoes.Complete || len(echoes.Mismatched) > 0 {
		failures = append(failures, fmt.Sprintf("data-channel echoes: %d of %d matched, %v", echoes.Matched, len(probes), echoes.Mismatched))
	}
	if c.RTPPacketsReceived == 0 && len(packets) > 0 {
		failures = append(failures, "no RTP came back")
	}
	return failures
}
