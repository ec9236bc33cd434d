#!/bin/sh
# vboard-ptt.sh PHASE OUT: one push-to-talk exchange on the virtual board, timed here
# in the guest (not over ssh). A 440 Hz tone (/root/tone.wav, 40 s) plays into the loopback's microphone side
# the whole time; the button is released, held, released, held, released, PHASE
# seconds each (a press is the line's pull going down: the button shorts it to
# ground); OUT.wav records what the speaker plays (the host's echo of what it heard),
# OUT.led samples the LED line every 50 ms. stdout: when recording began and each
# phase began (CLOCK_REALTIME seconds), for board/vm/judge.py.
set -eu
phase=$1 out=$2
gpio=$(cat /run/vboard-gpio)
pull=$gpio/sim_gpio0/pull
led=$gpio/sim_gpio1/value
echo pull-up > "$pull"
aplay -q -D plughw:CARD=Loopback,DEV=0,SUBDEV=0 /root/tone.wav &
tone=$!
echo "record $(date +%s.%N)"
arecord -q -D plughw:CARD=Loopback,DEV=1,SUBDEV=1 -f S16_LE -r 48000 -c 1 -d $((phase * 5)) "$out.wav" &
rec=$!
rm -f "$out.stop"
# The sampler forks nothing (bash builtins; `read -t` on a pipe that never delivers
# is its sleep): forks are dear under TCG and it must not load the board it measures.
bash -c 'exec 3<> <(:); while [ ! -e "$2.stop" ]; do read -r v < "$1"; echo "$EPOCHREALTIME $v"; read -t 0.05 -u 3 || true; done' \
  sampler "$led" "$out" > "$out.led" &
sampler=$!
for p in released held released held released; do
  if [ $p = held ]; then echo pull-down > "$pull"; else echo pull-up > "$pull"; fi
  echo "$p $(date +%s.%N)"
  sleep "$phase"
done
echo "end $(date +%s.%N)"
wait $rec || true
kill $tone 2>/dev/null || true
touch "$out.stop"
wait $sampler || true
rm -f "$out.stop"
