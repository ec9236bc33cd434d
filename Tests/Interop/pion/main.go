// pionpeer: an independent WebRTC test peer for Linnet's interop tests, on pion/webrtc
// v3 (Debian's 3.1.56), in the spirit of Tests/Interop/peer.py (aiortc).
//
//	pionpeer answer --listen 127.0.0.1:0 [--mode echo|tone] [--offer-setup keep|actpass|active|passive]
//	                [--answer-setup pion|active|passive] [--ogg F.opus] --report F.json --record F.ogg
//	pionpeer offer --url http://127.0.0.1:PORT/whip [--setup keep|actpass|active|passive]
//	                --ogg F.opus --record F.ogg --seconds N --report F.json
//
// answer prints `READY <port>` on stdout once listening, then one line per answered
// offer, `ANSWERED <id> offer=<setup> applied=<setup> answer=<setup>`, and one when
// that call's DTLS handshake starts, `DTLS <id> client|server`; logs go to stderr. The report
// is rewritten when a call ends and at exit (SIGTERM, SIGINT, --seconds, --once).
// offer exits 0 when the call connected, audio came back and every data-channel probe
// was echoed intact; 1 otherwise (the report's `failures` say why); 64 on usage errors.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pion/logging"
)

func usage(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "pionpeer: "+format+"\n", args...)
	fmt.Fprintln(os.Stderr, "usage: pionpeer answer --listen HOST:PORT [options] | pionpeer offer --url URL [options] (see main.go)")
	os.Exit(64)
}

func logLevel(name string) logging.LogLevel {
	switch name {
	case "error":
		return logging.LogLevelError
	case "warn", "":
		return logging.LogLevelWarn
	case "info":
		return logging.LogLevelInfo
	case "debug":
		return logging.LogLevelDebug
	case "trace":
		return logging.LogLevelTrace
	}
	usage("--log-level must be error, warn, info, debug or trace")
	return 0
}

func oneOf(flagName, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	usage("--%s must be one of %s", flagName, strings.Join(allowed, ", "))
}

func main() {
	log.SetFlags(log.Lmicroseconds)
	log.SetPrefix("pionpeer: ")
	if len(os.Args) < 2 {
		usage("a command is needed")
	}
	switch os.Args[1] {
	case "answer":
		answerMain(os.Args[2:])
	case "offer":
		offerMain(os.Args[2:])
	default:
		usage("unknown command %q", os.Args[1])
	}
}

func answerMain(args []string) {
	fs := flag.NewFlagSet("answer", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "HOST:PORT to listen on (port 0: any, printed in READY)")
	mode := fs.String("mode", "echo", "echo (audio and messages back) or tone (play --ogg)")
	offerSetup := fs.String("offer-setup", "keep", "rewrite the offer's a=setup before applying it: keep, actpass, active, passive")
	answerSetup := fs.String("answer-setup", "pion", "pion (its own choice) or force active/passive (SettingEngine.SetAnsweringDTLSRole)")
	ogg := fs.String("ogg", "", "tone mode: the Ogg/Opus file to send (one packet per page)")
	report := fs.String("report", "", "report file (JSON)")
	record := fs.String("record", "", "received audio as Ogg/Opus")
	seconds := fs.Float64("seconds", 0, "exit after N seconds (0: never)")
	once := fs.Bool("once", false, "exit when the first call ends")
	noPeerChannel := fs.Bool("no-peer-channel", false, "do not open peer-events")
	level := fs.String("log-level", "warn", "pion's log level: error, warn, info, debug, trace")
	_ = fs.Parse(args)
	oneOf("mode", *mode, "echo", "tone")
	oneOf("offer-setup", *offerSetup, "keep", "actpass", "active", "passive")
	oneOf("answer-setup", *answerSetup, "pion", "active", "passive")
	if *mode == "tone" && *ogg == "" {
		usage("--mode tone needs --ogg F.opus")
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		usage("--listen %q: %v", *listen, err)
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	p, err := newPeer("answer", *mode, *report, *record)
	if err != nil {
		log.Fatal(err)
	}
	a, err := newAnswerer(p, answerOptions{mode: *mode, offerSetup: *offerSetup, answerSetup: *answerSetup, ogg: *ogg,
		peerChannel: !*noPeerChannel, logLevel: logLevel(*level)}, loopback)
	if err != nil {
		log.Fatal(err)
	}
	exit := make(chan string, 4)
	if *once {
		p.onEnd = func(*Call) { exit <- "once" }
	}
	l, err := serveAnswer(a, *listen)
	if err != nil {
		log.Print(err)
		os.Exit(69)
	}
	p.writeReport()
	fmt.Printf("READY %d\n", l.Addr().(*net.TCPAddr).Port)
	log.Printf("listening on http://%s (WHIP: POST /whip; backend: POST /voice/CHAT), mode %s, offer setup %s, answer setup %s, pion %s",
		l.Addr(), *mode, *offerSetup, *answerSetup, pionVersion)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-signals
		if s == syscall.SIGTERM {
			exit <- "SIGTERM"
		} else {
			exit <- "SIGINT"
		}
	}()
	if *seconds > 0 {
		go func() {
			time.Sleep(time.Duration(*seconds * float64(time.Second)))
			exit <- "seconds"
		}()
	}
	reason := <-exit
	l.Close()
	p.shutdown(reason)
	log.Printf("exit: %s", reason)
}

func offerMain(args []string) {
	fs := flag.NewFlagSet("offer", flag.ExitOnError)
	target := fs.String("url", "", "the WHIP endpoint, e.g. http://127.0.0.1:PORT/whip")
	setup := fs.String("setup", "keep", "rewrite pion's own offer's a=setup: keep (pion's actpass), actpass, active, passive")
	ogg := fs.String("ogg", "", "the Ogg/Opus file to send (one packet per page)")
	report := fs.String("report", "", "report file (JSON)")
	record := fs.String("record", "", "received audio as Ogg/Opus")
	seconds := fs.Float64("seconds", 5, "call length from connected")
	level := fs.String("log-level", "warn", "pion's log level: error, warn, info, debug, trace")
	_ = fs.Parse(args)
	if *target == "" {
		usage("--url is needed")
	}
	oneOf("setup", *setup, "keep", "actpass", "active", "passive")
	p, err := newPeer("offer", "offer", *report, *record)
	if err != nil {
		log.Fatal(err)
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		p.shutdown("SIGTERM")
		os.Exit(1)
	}()
	failures := runOffer(p, offerOptions{url: *target, setup: *setup, ogg: *ogg, seconds: *seconds, logLevel: logLevel(*level)})
	ok := len(failures) == 0
	p.mu.Lock()
	p.report.OK = &ok
	p.report.Failures = failures
	p.mu.Unlock()
	p.shutdown("done")
	if !ok {
		for _, f := range failures {
			log.Printf("FAIL: %s", f)
		}
		os.Exit(1)
	}
	log.Printf("ok")
}
