// Opus in and out of Ogg files. pion has no Opus encoder or decoder: what pion sends
// is a prepared Ogg/Opus file (made by the test with opusenc) and what it receives is
// written, still encoded, to an Ogg/Opus file (decoded by the test with opusdec).
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v3"
	"github.com/pion/webrtc/v3/pkg/media"
	"github.com/pion/webrtc/v3/pkg/media/oggreader"
	"github.com/pion/webrtc/v3/pkg/media/oggwriter"
)

// opusSamples is the duration of an Opus packet in 48 kHz samples, from its TOC byte
// and frame count (RFC 6716 §3.1); 0 when the packet is malformed.
func opusSamples(packet []byte) int {
	if len(packet) == 0 {
		return 0
	}
	toc := packet[0]
	config := int(toc >> 3)
	var frame int // in 1/400 s units of 48 kHz: 2.5 ms = 120 samples
	switch {
	case config < 12: // SILK: 10, 20, 40, 60 ms
		frame = []int{480, 960, 1920, 2880}[config%4]
	case config < 16: // Hybrid: 10, 20 ms
		frame = []int{480, 960}[config%2]
	default: // CELT: 2.5, 5, 10, 20 ms
		frame = []int{120, 240, 480, 960}[config%4]
	}
	frames := 1
	switch toc & 3 {
	case 1, 2:
		frames = 2
	case 3:
		if len(packet) < 2 {
			return 0
		}
		frames = int(packet[1] & 0x3f)
	}
	return frame * frames
}

// oggPacket is one Opus packet of a file and its duration.
type oggPacket struct {
	data    []byte
	samples int
}

// readOgg reads every audio packet of an Ogg/Opus file with pion's oggreader. That
// reader returns a page's segments joined, so it needs one packet per page (opusenc
// --max-delay 20 or less); a page whose granule advances by more than its first
// packet lasts holds several packets and is refused rather than sent as garbage.
func readOgg(path string) ([]oggPacket, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reader, header, err := oggreader.NewWith(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if header.SampleRate == 0 {
		return nil, fmt.Errorf("%s: no Opus header", path)
	}
	var packets []oggPacket
	var granule uint64
	for {
		payload, page, err := reader.ParseNextPage()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(payload) >= 8 && string(payload[:8]) == "OpusTags" {
			continue
		}
		n := opusSamples(payload)
		if n == 0 {
			return nil, fmt.Errorf("%s: a page that is not one Opus packet", path)
		}
		if page.GranulePosition > granule+uint64(n) {
			return nil, fmt.Errorf("%s: a page holds several packets (granule +%d, packet %d samples): make it with opusenc --max-delay 20",
				path, page.GranulePosition-granule, n)
		}
		granule = page.GranulePosition
		packets = append(packets, oggPacket{payload, n})
	}
	if len(packets) == 0 {
		return nil, fmt.Errorf("%s: no audio packets", path)
	}
	return packets, nil
}

// playOgg sends the packets on `track` paced in real time (each one at its place on
// the time axis from the first, so the pace does not drift), until `stop` closes or
// the file ends. Counts what it sends once the call is connected.
func playOgg(c *Call, track *webrtc.TrackLocalStaticSample, packets []oggPacket, stop <-chan struct{}) {
	start := time.Now()
	var at time.Duration
	for _, p := range packets {
		if wait := time.Until(start.Add(at)); wait > 0 {
			select {
			case <-stop:
				return
			case <-time.After(wait):
			}
		}
		d := time.Duration(p.samples) * time.Second / 48000
		if err := track.WriteSample(media.Sample{Data: p.data, Duration: d}); err == nil && c.isConnected() {
			c.sent(len(p.data))
		}
		at += d
	}
}

// recorder writes received Opus to one Ogg file with pion's oggwriter, for the whole
// process: each call's timestamps are shifted to follow the previous call's, so the
// granule positions keep growing. pion's oggwriter puts each packet in a page with a
// single lacing value, so packets of 255 bytes or more cannot be written: they are
// skipped and counted (Linnet sends about 80-byte packets at 32 kbit/s). Its pages go
// through pageFixer on the way to the file (see there).
type recorder struct {
	mu   sync.Mutex
	w    *oggwriter.OggWriter
	out  *pageFixer
	next uint32
}

type trackStamp struct {
	set         bool
	first, base uint32
}

func newRecorder(path string) (*recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	out := &pageFixer{f: f}
	w, err := oggwriter.NewWith(out, 48000, 1)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &recorder{w: w, out: out}, nil
}

func (r *recorder) write(s *trackStamp, pkt *rtp.Packet) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil || len(pkt.Payload) == 0 || len(pkt.Payload) >= 255 {
		return false
	}
	if !s.set {
		s.set, s.first, s.base = true, pkt.Timestamp, r.next
	}
	out := *pkt
	out.Timestamp = s.base + (pkt.Timestamp - s.first)
	if err := r.w.WriteRTP(&out); err != nil {
		return false
	}
	r.next = out.Timestamp + uint32(opusSamples(pkt.Payload))
	return true
}

func (r *recorder) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		r.out.finish()
		r.w = nil
	}
}

// pageFixer takes the pages pion's oggwriter writes (one Write per page) and corrects
// what opusfile (opusdec) refuses: pion gives each audio page the granule position of
// its packet's start (1 for the first page) where RFC 7845 §4 wants the end, and a
// first page whose granule is below its sample count is an error (opusdec: "Failed to
// open"). Each audio page's granule becomes start + the packet's duration and its CRC
// is recomputed. The last page is held back so that finish() can mark it
// end-of-stream. (Pre-skip: pion writes 3840 and does not count it in its granules,
// so a decoder drops the first 80 ms of what was received.)
type pageFixer struct {
	f       *os.File
	pending []byte
}

func (w *pageFixer) Write(p []byte) (int, error) {
	page := append([]byte(nil), p...)
	if len(page) >= 28 && string(page[:4]) == "OggS" && page[26] == 1 {
		granule := binary.LittleEndian.Uint64(page[6:14])
		if granule != 0 { // header pages have 0; audio pages start at 1
			payload := page[28:]
			if n := int(page[27]); n <= len(payload) {
				payload = payload[:n]
			}
			binary.LittleEndian.PutUint64(page[6:14], granule-1+uint64(opusSamples(payload)))
			oggCRC(page)
		}
	}
	if err := w.flush(); err != nil {
		return 0, err
	}
	w.pending = page
	return len(p), nil
}

func (w *pageFixer) flush() error {
	if w.pending == nil {
		return nil
	}
	_, err := w.f.Write(w.pending)
	w.pending = nil
	return err
}

func (w *pageFixer) finish() {
	if w.pending != nil && len(w.pending) >= 27 {
		w.pending[5] |= 0x04 // end of stream
		oggCRC(w.pending)
	}
	_ = w.flush()
	_ = w.f.Close()
}

// oggCRC sets a page's CRC: CRC-32, polynomial 0x04c11db7, not reflected, initial 0,
// over the page with its CRC field zeroed (RFC 3533 §6).
func oggCRC(page []byte) {
	page[22], page[23], page[24], page[25] = 0, 0, 0, 0
	var crc uint32
	for _, b := range page {
		crc ^= uint32(b) << 24
		for i := 0; i < 8; i++ {
			if crc&0x80000000 != 0 {
				crc = crc<<1 ^ 0x04c11db7
			} else {
				crc <<= 1
			}
		}
	}
	binary.LittleEndian.PutUint32(page[22:26], crc)
}
