#!/usr/bin/env bash
# Audio figures, one `BENCH <name> <value> <unit>` line each (docs: CLI.md):
#   - instructions per 10 ms 48 kHz mono frame of every built-in hook (echo canceller and
#     noise suppression too, with the canceller's ERLE on the tests' simulation), of the
#     full chain (default_chain: high-pass at 20 Hz, AGC, noise gate, limiter, meter, run
#     through HookChain) and of the chain `linnet run` builds from the Settings defaults
#     (product_chain: high-pass at 80 Hz, limiter, meter, mute gate);
#   - instructions per 20 ms frame of Opus encode and decode as the product configures
#     them (48 kHz mono, 32 kbit/s, FEC, libopus' default complexity), and per second of
#     encoding at complexities 2, 5, 8 and 10 with the speech quality of each;
#   - allocation calls per frame on the capture path (a real count, CAllocCounter).
# Instructions are counted by callgrind (exact and repeatable on a busy machine), or for
# arm64 from qemu-user's logs (bench/qemu-count.py), inside the per-frame functions only
# (--toggle-collect), as (I(N2) − I(N1)) / (N2 − N1) so set-up and first-call costs
# cancel. The test signal is speech-like with pauses and a
# DC offset (bench/LinnetBench/Bench.swift) and repeats every 100 frames (1 s).
#
# usage: [KERNELS="hpf agc …"] bench/audio.sh [full|embedded|arm64]   (default: full = full Swift -O;
#        embedded = the release build's Embedded Swift -Osize, whose names get an _osize
#        suffix; arm64 = the same for the boards' aarch64, counted under qemu-user by
#        bench/qemu-count.py, names suffixed _arm64)
set -euo pipefail
mode=${1:-full}
top=$(cd "$(dirname "$0")/.." && pwd)
export PATH=$PATH:/opt/swift/usr/bin
bench=$("$top/bench/build.sh" "$mode" | tail -1)
suffix=""
[ "$mode" = embedded ] && suffix="_osize"
[ "$mode" = arm64 ] && suffix="_arm64"
# run <kernel> <frames>: the bench itself, under qemu-user for arm64.
run() {
  if [ "$mode" = arm64 ]; then qemu-aarch64-static -L /usr/aarch64-linux-gnu "$bench" "$@"; else "$bench" "$@"; fi
}

# instructions <kernel> <n1> <n2> → per-frame instruction count
instructions() {
  local kernel=$1 n1=$2 n2=$3 i1 i2
  i1=$(collected "$kernel" "$n1")
  i2=$(collected "$kernel" "$n2")
  echo $(( (i2 - i1 + (n2 - n1) / 2) / (n2 - n1) ))
}
collected() {
  if [ "$mode" = arm64 ]; then "$top/bench/qemu-count.py" "$bench" "$1" "$2"; return; fi
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect='*measured*' \
    "$bench" "$1" "$2" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

kernels=${KERNELS:-hpf hpf80 gain agc gate limiter meter mute chain product_chain aec ns opus wake}
# Under qemu the echo canceller's rooms take minutes: arm64 counts the hooks, Opus and
# the wake word.
[ "$mode" = arm64 ] && kernels=${KERNELS:-hpf hpf80 gain agc gate limiter meter mute chain product_chain opus wake}
for pair in hpf:highpass hpf80:highpass_80hz gain:gain agc:agc gate:noise_gate limiter:limiter meter:level_meter \
            mute:mute_gate chain:default_chain product_chain:product_chain; do
  kernel=${pair%%:*}; name=${pair#*:}
  [[ " $kernels " == *" $kernel "* ]] || continue
  echo "BENCH audio_${name}_instructions_per_frame$suffix $(instructions "$kernel" 100 300) instructions"
done
# The wake word's detector thread per second of capture (issue 40's goal: at most 20 M
# on arm64, about 2 % of a Cortex-A53): 48 kHz → 16 kHz, features, okay_nabu (the
# largest model) every third 10 ms frame; frames 99..399 so each count holds 100 inferences.
if [[ " $kernels " == *" wake "* ]]; then
  "$top/scripts/fetch-wake-models.sh" "$top/build/third_party/wake"
  export LINNET_WAKE_MODEL=$top/build/third_party/wake/okay_nabu.tflite
  per_frame=$(instructions wake 99 399)
  echo "BENCH wake_instructions_per_second$suffix $((per_frame * 100)) instructions (okay_nabu, from 48 kHz capture)"
  # Memory: the bench's peak RSS running the detector, over running the mute gate
  # (qemu-user's own memory would swamp it on arm64).
  if [ "$mode" != arm64 ]; then
    rss() { LINNET_BENCH_RSS=1 "$bench" "$@" | sed -n 's/^vmhwm_kb //p'; }
    echo "BENCH wake_rss_added_kb$suffix $(( $(rss wake 300) - $(rss mute 300) )) KB (peak RSS with okay_nabu loaded and run, over the mute gate's)"
  fi
fi
# speexdsp: the tuned floating-point library both builds link (bench/build.sh). The canceller at 48 kHz with its default 250 ms
# filter and the delay search; noise suppression at 15 dB. ERLE: the tests' echo-path
# simulation (RT60 0.2 s, 120 ms, −6 dB), far-end-only speech 8–12 s (after convergence).
if [[ " $kernels " == *" aec "* ]]; then
  echo "BENCH aec_instructions_per_frame$suffix $(instructions aec 100 300) instructions"
  # The same with a fixed delay: speexdsp's MDF alone, without Linnet's delay search.
  echo "BENCH aec_mdf_instructions_per_frame$suffix $(instructions aec_mdf 100 300) instructions"
  # aec_res: with the residual echo suppressor behind it (aec-suppress-db = 40, the default).
  for k in aec_erle:aec_erle_db aec_erle_16k:aec_erle_16k_db aec_res_erle:aec_res_erle_db; do
    tenths=$(run "${k%%:*}" 0 | sed -n 's/^erle_tenths //p')
    echo "BENCH ${k#*:}$suffix $(awk -v t="$tenths" 'BEGIN { printf "%.1f", t / 10 }') dB"
  done
  # 24 rooms (4 seeds × delays 50/120/250 ms × RT60 0.2/0.5 s, 16 kHz, residual
  # suppressor): ERLE after convergence and the time to 20 dB, mean and worst.
  run aec_rooms 0 | while read -r key tenths; do
    unit=dB; [[ $key == *conv* ]] && unit=s
    echo "BENCH aec_rooms_${key%_tenths}$suffix $(awk -v t="$tenths" 'BEGIN { printf "%.1f", t / 10 }') $unit"
  done
fi
# The echo grid of rooms (bench/LinnetBench/Grid.swift): 81 cells of echo delay
# 10/120/300 ms, RT60 0.2/0.4/0.6 s, echo 10 dB under to 10 dB over the talker and
# −100/0/+100 ppm, each with its ERLE and double-talk SNR, then the worst of each and how
# many cells meet 25 dB / 10 dB. Run as it is (not under callgrind): about two minutes.
if [ "$mode" = full ] && [[ " ${KERNELS:-aec_grid} " == *" aec_grid "* ]]; then
  run aec_grid 0
fi
if [[ " $kernels " == *" ns "* ]]; then
  echo "BENCH ns_instructions_per_frame$suffix $(instructions ns 100 300) instructions"
fi
# libopus is the same C library in the two x86 modes (Debian's -O2 build), so it is
# counted once there; arm64 has Debian's arm64 build of it (with its NEON code).
opus=""
[ "$mode" != embedded ] && [[ " $kernels " == *" opus "* ]] && opus=yes
if [ -n "$opus" ]; then
  echo "BENCH opus_encode_instructions_per_frame$suffix $(instructions opus_encode 50 100) instructions"
  echo "BENCH opus_decode_instructions_per_frame$suffix $(instructions opus_decode 50 100) instructions"
fi

# The encoder at the complexities the default was chosen from: instructions
# per second of audio (50 frames of 20 ms), and the speech quality each gives
# (bench/opus-quality.py: aligned SNR and spectral distortion in 300–7000 Hz; it needs
# numpy, found in the interop venv of Tests/Interop/setup.sh or the system Python).
# The quality is measured once, in full mode.
if [ -n "$opus" ]; then
  for c in ${COMPLEXITIES:-2 5 8 10}; do
    echo "BENCH opus_c${c}_encode_instructions_per_second$suffix $(( $(instructions "opus_encode_c$c" 50 100) * 50 )) instructions"
  done
fi
if [ "$mode" = full ] && [[ " $kernels " == *" opus "* ]]; then
  py=""
  if python3 -c 'import numpy' 2>/dev/null; then py=python3
  elif venv=$("$top/Tests/Interop/setup.sh" 2>/dev/null | tail -n 1) && [ -x "$venv" ]; then py=$venv; fi
  if [ -n "$py" ]; then "$py" "$top/bench/opus-quality.py" ${COMPLEXITIES:-2 5 8 10}
  else echo "bench/audio.sh: no Python with numpy: opus quality figures skipped" >&2; fi
fi

read -r _ allocations _ frames < <(run capture_allocations 1100)
# Printed as a fraction (%g): one allocation in a thousand frames must not round to 0.
echo "BENCH capture_allocations_per_frame$suffix $(awk -v a="$allocations" -v f="$frames" 'BEGIN { printf "%g", a / f }') count"
