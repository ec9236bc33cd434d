# Linnet: one task per target (README lists them).
SHELL := /bin/bash
export PATH := $(PATH):/opt/swift/usr/bin
# The arm64 binary runs on Debian's multiarch arm64 C library (libc6:arm64, which
# setup.sh installs with libc6-dev:arm64), loader and libc.so of one package, as on a
# board. With -L /usr/aarch64-linux-gnu, qemu took the cross package's loader (2.36-8)
# but, finding no libc.so.6 under that prefix's multiarch path, the host's arm64 libc
# (2.36-9+deb12u14): a private-ABI mismatch that sent the first pthread_create into an
# endless walk of a corrupt thread-stack list (the selftest never starts a thread).
QEMU := qemu-aarch64-static -L /
# The full-Swift build links the speexdsp the release build links (Linnet's tuned MDF,
# scripts/build-speexdsp.sh), found through its pkg-config file; `deps` builds it.
export PKG_CONFIG_PATH := $(CURDIR)/build/third_party/speexdsp/host/lib/pkgconfig$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))

.PHONY: setup deps build test demo release arm64 qemu-check size bench clean

## setup: install every Debian package the builds and tests need (idempotent)
setup:
	scripts/setup.sh

# Every build checks its packages first (a second or so when all are there), so the
# README's commands work on a fresh machine as they stand.
deps:
	@scripts/setup.sh --quiet
	@scripts/build-speexdsp.sh host

## build: the full-Swift debug build (.build/debug/linnet)
build: deps
	swift build -Xswiftc -warnings-as-errors

# The suites that judge a whole call's audio against the wall clock (a real-time call
# to an independent peer, a rollover, the watchdog's pings, the duplex judges' calls):
# they run in a second pass, one test at a time, after the rest has run in parallel. Run beside the rest of the
# suite on two cores, a call's processes (Linnet's debug build, the peer) were now and
# then starved for a second or more, and that much of the call's audio went missing
# (loaded runs here and in CI: 53-73 % of the echo's windows; 100 % in every run alone).
export REALTIME_TESTS := PionInteropTests|GStreamerInteropTests|\.InteropTests|TURNCallTests|RelayTests|AgentEndToEndTests|WatchdogTests|WakeCallTests|DuplexRoomTests/(shortDuplexCallIsUnderstood|onDemandRequests)

## test: the whole test suite, full Swift, warnings as errors; the interop tests run
## against the aiortc peer in build/interop-venv (made by Tests/Interop/setup.sh), the
## duplex judges with the speech venv build/speech-venv (Tests/Speech/setup.sh); the
## real-time suites (REALTIME_TESTS) last, one test at a time
test: deps
	swift build --build-tests -Xswiftc -warnings-as-errors
	AIORTC_PYTHON="$$(Tests/Interop/setup.sh | tail -n 1)" SPEECH_PYTHON="$$(Tests/Speech/setup.sh | tail -n 1)" swift test --skip-build --skip '$(REALTIME_TESTS)'
	AIORTC_PYTHON="$$(Tests/Interop/setup.sh | tail -n 1)" SPEECH_PYTHON="$$(Tests/Speech/setup.sh | tail -n 1)" swift test --skip-build --no-parallel --filter '$(REALTIME_TESTS)'

## demo: a whole call on this machine (built-in answerer, test voice, loopback UDP);
## it installs only what the demo needs (scripts/setup.sh --demo), not the test peers
demo:
	@scripts/setup.sh --quiet --demo
	@scripts/build-speexdsp.sh host
	swift build -Xswiftc -warnings-as-errors
	.build/debug/linnet demo

## release: the Embedded Swift build for this machine → build/host/linnet
release: deps
	scripts/embedded-build.sh host $(SWIFTFLAGS)
	scripts/check-needed.sh build/host/linnet

## arm64: the Embedded Swift cross build for aarch64 → build/arm64/linnet
arm64: deps
	scripts/embedded-build.sh arm64 $(SWIFTFLAGS)
	scripts/check-needed.sh build/arm64/linnet

## qemu-check: the arm64 binary's selftest and a 5 s demo call under qemu-user
qemu-check: build/arm64/linnet
	$(QEMU) build/arm64/linnet selftest
	@# The whole release binary in a call: its threads, the -O2/-Os libopus mix, DTLS-SRTP,
	@# SCTP. Under qemu it keeps real time with room to spare (2.3 CPU-s for a 5 s call).
	$(QEMU) build/arm64/linnet demo --seconds 5 --output build/arm64/demo.wav --events build/arm64/demo-events.jsonl

build/arm64/linnet:
	$(MAKE) arm64

build/host/linnet:
	$(MAKE) release

## size: stripped arm64 size, its dynamic dependencies, what each part adds, and a check
## that no function reaches the Unicode tables (scripts/unicode-users.py)
size: build/arm64/linnet
	@echo "BENCH arm64_stripped_bytes $$(stat -c %s build/arm64/linnet.stripped) bytes"
	@echo "NEEDED: $$(readelf -d build/arm64/linnet | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
	@scripts/size-report.py build/arm64/linnet.map $(addprefix build/third_party/arm64/lib/,libmbedtls.a libmbedx509.a libmbedcrypto.a libsrtp2.a)
	@scripts/unicode-users.py build/arm64/linnet --require-none normalisation,grapheme

## bench: every figure, one BENCH line each (audio: callgrind counts, bench/audio.sh;
## arm64: the same under qemu-user, bench/qemu-count.py)
bench: size release
	@bench/audio.sh full
	@bench/audio.sh embedded
	@bench/audio.sh arm64
	@bench/network.sh build/host/linnet
	@bench/call-instructions.sh build/host/linnet
	@bench/turn.sh build/host/linnet
	@bench/flood.py build/host/linnet
	@bench/latency.py build/host/linnet
	@WAKE_SECONDS=600 LINNET_BIN=build/host/linnet bench/wake.sh

clean:
	rm -rf .build build

# --- On the board: packages, the unit check -------------------------------------------
.PHONY: deb deb-host test-deb check-unit bench-board vboard

## deb: the arm64 package from the release binary → build/linnet_<version>_arm64.deb
deb: build/arm64/linnet
	scripts/build-deb.sh build/arm64/linnet build

## deb-host: the same package for this machine, from `make release` (build/host/linnet)
deb-host: release
	scripts/build-deb.sh build/host/linnet build

## test-deb: install, upgrade and purge the host package here (root), check the arm64 one
test-deb: build/host/linnet build/arm64/linnet deb
	scripts/test-deb.sh build/host/linnet build/linnet_$$(scripts/version.sh)_arm64.deb

## image: the SD card image for Raspberry Pi 3B+, 4 and Zero 2 W (board/image/build.sh):
## Debian 12 arm64 from apt, the arm64 package installed, first-boot provisioning from
## the boot partition; build/linnet-<version>-rpi-arm64.img.xz. Its Debian root is
## cached in /var/cache/linnet-image (LINNET_IMAGE_CACHE), keyed on its inputs.
.PHONY: image
image: deb
	board/image/build.sh build/linnet_$$(scripts/version.sh)_arm64.deb build/linnet-$$(scripts/version.sh)-rpi-arm64.img.xz

## vboard: the virtual board (board/vm): the SD card image (as make image builds it,
## raw) with its own kernel under qemu-system-aarch64 (snd-aloop, gpio-sim, systemd),
## provisioned through its boot partition, calling the host release binary's answerer;
## one PASS/FAIL line a scenario, then figures. VBOARD_POWERCUTS (20) power cuts at random
## moments of calls and boots. gpio-sim.ko is cached in /var/cache/linnet-vboard.
vboard: deps deb build/host/linnet
	board/vm/vboard.sh build/linnet_$$(scripts/version.sh)_arm64.deb build/host/linnet $(VBOARD_SCENARIOS)

## check-unit: systemd-analyze verify and security (≤ 2.0) of systemd/linnet.service
check-unit:
	@scripts/check-unit.sh

# Figures for `make bench`: the unit's exposure and the arm64 package's size.
bench: bench-board
bench-board: deb
	@scripts/check-unit.sh
	@echo "BENCH deb_arm64_bytes $$(stat -c %s build/linnet_$$(scripts/version.sh)_arm64.deb) bytes"

# --- Fuzzing and sanitizers ----------------------------------------------------------
.PHONY: fuzz fuzz-ci sanitize tsan
FUZZ_SECONDS ?= 60

## fuzz: every libFuzzer target in Fuzz/ for FUZZ_SECONDS (60) each; fails on a finding
fuzz: deps
	scripts/fuzz.sh $(FUZZ_SECONDS)

## fuzz-ci: the short pass CI runs (10 s a target)
fuzz-ci: deps
	scripts/fuzz.sh 10

## sanitize: the whole test suite under AddressSanitizer (.build-asan), interop peer included as in `make test`
sanitize: deps
	AIORTC_PYTHON="$$(Tests/Interop/setup.sh | tail -n 1)" scripts/sanitize.sh address

## tsan: the threaded tests (rings, hook switching, loop hand-off, audio threads) under ThreadSanitizer (.build-tsan)
tsan: deps
	scripts/sanitize.sh thread
