#!/usr/bin/env bash
# The wake word on speech, Linnet next to its reference (pymicro-wakeword 2.5.0 on its
# own TFLite runtime) on the same recordings, one `BENCH` line each:
#   - per model, the synthesized recordings of its phrase (Tests/Wake/reference.py
#     clips: voices, speeds, levels, noise, room echo, inside a sentence) it wakes on;
#   - per model, false wakes on WAKE_SECONDS (default 3600) of mixed speech that never
#     says a wake word, and that as wakes per hour.
# Synthetic voices are a weak judge of a model (the issue's own measure: the reference
# fires on 7 of 12 espeak variants of "okay nabu"): the figures compare Linnet with the
# reference, they do not rate the models.
#
# usage: [WAKE_SECONDS=600] bench/wake.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
seconds=${WAKE_SECONDS:-3600}
py=$(Tests/Speech/setup.sh | tail -n 1)
scripts/fetch-wake-models.sh
bench=$(bench/build.sh full | tail -n 1)
dir=build/bench/wake
mkdir -p "$dir"
rm -rf "$dir/clips"
"$py" Tests/Wake/reference.py clips "$dir/clips" --set full
[ -f "$dir/long-$seconds.raw" ] || "$py" Tests/Wake/reference.py long "$dir/long-$seconds.raw" "$seconds"
linnet() { # MODEL RAW → wakes
  local json=build/third_party/wake/$1.json
  LINNET_WAKE_MODEL=build/third_party/wake/$1.tflite LINNET_WAKE_INPUT=$2 \
  LINNET_WAKE_CUTOFF=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["micro"]["probability_cutoff"])' "$json") \
  LINNET_WAKE_WINDOW=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["micro"]["sliding_window_size"])' "$json") \
    "$bench" wake_file 0 | sed -n 's/^wakes \([0-9]*\).*/\1/p'
}
for m in okay_nabu hey_jarvis alexa hey_mycroft; do
  total=0 ours=0 theirs=0 both=0
  for raw in "$dir/clips/$m"_*.raw; do
    total=$((total + 1))
    a=$(linnet "$m" "$raw"); b=$("$py" Tests/Wake/reference.py events "build/third_party/wake/$m.json" "$raw")
    [ "$a" -gt 0 ] && ours=$((ours + 1))
    [ "$b" -gt 0 ] && theirs=$((theirs + 1))
    [ "$a" -gt 0 ] && [ "$b" -gt 0 ] && both=$((both + 1))
  done
  echo "BENCH wake_detected_${m} linnet $ours reference $theirs both $both of $total recordings of the phrase"
  a=$(linnet "$m" "$dir/long-$seconds.raw"); b=$("$py" Tests/Wake/reference.py events "build/third_party/wake/$m.json" "$dir/long-$seconds.raw")
  echo "BENCH wake_false_wakes_${m} linnet $a reference $b in $seconds s of speech ($(awk -v a="$a" -v s="$seconds" 'BEGIN { printf "%.1f", a * 3600 / s }') an hour)"
done
