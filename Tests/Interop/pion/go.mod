module linnet.test/pionpeer

go 1.19

// Built offline in GOPATH mode against Debian's golang-github-pion-webrtc.v3-dev
// (see build.sh): Go's minimal module compatibility resolves the /v3 import to
// /usr/share/gocode/src/github.com/pion/webrtc because this package has a go.mod and
// sits inside a GOPATH src tree. Nothing is downloaded.
require github.com/pion/webrtc/v3 v3.1.56
