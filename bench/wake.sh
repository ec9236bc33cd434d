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
  raws=("$dir/clips/$m"_*.raw)
  mapfile -t theirs < <("$py" Tests/Wake/reference.py events "build/third_party/wake/$m.json" "${raws[@]}")
  ours=0 ref=0 both=0
  for i in "${!raws[@]}"; do
    a=$(linnet "$m" "${raws[$i]}")
    [ "$a" -gt 0 ] && ours=$((ours + 1))
    [ "${theirs[$i]}" -gt 0 ] && ref=$((ref + 1))
    [ "$a" -gt 0 ] && [ "${theirs[$i]}" -gt 0 ] && both=$((both + 1))
  done
  echo "BENCH wake_detected_${m} linnet $ours reference $ref both $both of ${#raws[@]} recordings of the phrase"
  a=$(linnet "$m" "$dir/long-$seconds.raw"); b=$("$py" Tests/Wake/reference.py events "build/third_party/wake/$m.json" "$dir/long-$seconds.raw")
  echo "BENCH wake_false_wakes_${m} linnet $a reference $b in $seconds s of speech ($(awk -v a="$a" -v s="$seconds" 'BEGIN { printf "%.1f", a * 3600 / s }') an hour)"
done
# Self-wakes: the assistant's replies saying "okay nabu" through a simulated room
# (reference.py room), heard by the microphone with no canceller, and after `linnet
# audio --aec` (the canceller and its residual suppressor, as run's chain has them);
# and the user saying it over six replies, after the canceller.
linnet_bin=${LINNET_BIN:-.build/debug/linnet}
"$py" Tests/Wake/reference.py room "$dir/room"
"$linnet_bin" audio --input "$dir/room/mic.wav" --reference "$dir/room/speaker.wav" --output "$dir/room/mic-aec.wav" --aec >/dev/null
"$linnet_bin" audio --input "$dir/room/mic_user.wav" --reference "$dir/room/speaker.wav" --output "$dir/room/mic_user-aec.wav" --aec >/dev/null
for f in mic mic-aec mic_user mic_user-aec; do "$py" Tests/Wake/reference.py to16k "$dir/room/$f.wav" "$dir/room/$f.raw"; done
secs=$(( $(stat -c %s "$dir/room/mic.raw") / 32000 ))
said=$(cat "$dir/room/user-says-it.txt")
echo "BENCH wake_self_wakes_okay_nabu no_aec $(linnet okay_nabu "$dir/room/mic.raw") aec $(linnet okay_nabu "$dir/room/mic-aec.raw") in $secs s of replies saying it 28 times (reference, no aec: $("$py" Tests/Wake/reference.py events build/third_party/wake/okay_nabu.json "$dir/room/mic.raw"))"
echo "BENCH wake_user_over_reply_okay_nabu no_aec $(linnet okay_nabu "$dir/room/mic_user.raw") aec $(linnet okay_nabu "$dir/room/mic_user-aec.raw") wakes for $said times the user said it over a reply"
