package main

import (
	"fmt"
	"log"
	"sync"
	"time"
)

// pionVersion is set by build.sh from the Debian package's version.
var pionVersion = "unknown"

// HTTPEntry is one HTTP request served (answer mode) or made (offer mode).
type HTTPEntry struct {
	Method string  `json:"method"`
	Path   string  `json:"path"`
	Status int     `json:"status"`
	T      float64 `json:"t"`
}

// Report is the whole file written to --report.
type Report struct {
	Command    string      `json:"command"` // answer or offer
	Mode       string      `json:"mode"`
	Pion       string      `json:"pion_version"`
	ExitReason string      `json:"exit_reason,omitempty"`
	OK         *bool       `json:"ok,omitempty"` // offer mode: the verdict
	Failures   []string    `json:"failures,omitempty"`
	Offers     int         `json:"offers"`
	HTTP       []HTTPEntry `json:"http"`
	Record     string      `json:"record,omitempty"`
	Sessions   []*Call     `json:"sessions"`
	Last       *Call       `json:"last,omitempty"`
}

// Peer holds the process's calls and report; mu guards every call's report fields too.
type Peer struct {
	mu         sync.Mutex
	report     Report
	reportPath string
	recorder   *recorder
	started    time.Time
	calls      map[string]*Call
	nextID     int
	onEnd      func(*Call) // after a call has ended (answer --once)
}

func newPeer(command, mode, reportPath, recordPath string) (*Peer, error) {
	p := &Peer{reportPath: reportPath, started: time.Now(), calls: map[string]*Call{}}
	p.report = Report{Command: command, Mode: mode, Pion: pionVersion, HTTP: []HTTPEntry{}, Sessions: []*Call{}, Record: recordPath}
	if recordPath != "" {
		r, err := newRecorder(recordPath)
		if err != nil {
			return nil, fmt.Errorf("--record %s: %w", recordPath, err)
		}
		p.recorder = r
	}
	return p, nil
}

func (p *Peer) newCall(route, chat string) *Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextID++
	c := &Call{ID: fmt.Sprintf("p%d", p.nextID), Route: route, ChatID: chat, start: time.Now(), peer: p, done: make(chan struct{}),
		States: []StateEntry{}, DataChannels: []*ChannelReport{}, DataChannelLabels: []string{}, RTPPayloadTypes: []int{}, RTPSSRCs: []uint32{}}
	p.report.Offers++
	p.report.Sessions = append(p.report.Sessions, c)
	p.report.Last = c
	p.calls[c.ID] = c
	return c
}

func (p *Peer) http(method, path string, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.report.HTTP = append(p.report.HTTP, HTTPEntry{method, path, status, round3(time.Since(p.started).Seconds())})
}

// endCall closes a call once (whatever ends it first) and rewrites the report; it
// returns the call's length from connected to now (0 if it never connected).
func (p *Peer) endCall(c *Call, reason string) float64 {
	p.mu.Lock()
	if c.ended {
		s := c.Seconds
		p.mu.Unlock()
		return s
	}
	c.ended = true
	close(c.done)
	c.EndReason = reason
	if !c.connected.IsZero() {
		c.Seconds = round3(time.Since(c.connected).Seconds())
	}
	seconds := c.Seconds
	delete(p.calls, c.ID)
	p.mu.Unlock()
	if c.pc != nil {
		_ = c.pc.Close()
	}
	log.Printf("call %s ended: %s (%.1f s)", c.ID, reason, seconds)
	p.writeReport()
	if p.onEnd != nil {
		p.onEnd(c)
	}
	return seconds
}

func (p *Peer) writeReport() {
	if p.reportPath == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := writeJSON(p.reportPath, &p.report); err != nil {
		log.Printf("report: %v", err)
	}
}

// shutdown ends every open call, closes the recording and writes the report.
func (p *Peer) shutdown(reason string) {
	p.mu.Lock()
	open := make([]*Call, 0, len(p.calls))
	for _, c := range p.calls {
		open = append(open, c)
	}
	p.report.ExitReason = reason
	p.mu.Unlock()
	for _, c := range open {
		p.endCall(c, "peer exit ("+reason+")")
	}
	if p.recorder != nil {
		p.recorder.close()
	}
	p.writeReport()
}
