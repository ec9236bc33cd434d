#!/usr/bin/env bash
# The virtual board: the arm64 package on Debian 12 arm64 with Debian's own
# kernel under qemu-system-aarch64 (TCG), systemd as PID 1, snd-aloop as the sound card
# and gpio-sim as the button's and LED's chip, calling `linnet answer` on this host.
#
#   board/vm/vboard.sh DEB HOST_LINNET [SCENARIO...]
#
# DEB is the arm64 package (make deb), HOST_LINNET a linnet for this machine (the
# answerer). Scenarios, in order: provision tool call watchdog card netem powercut upgrade
# (by default all). One line each: "VBOARD PASS name: what was checked" or
# "VBOARD FAIL name: why", then the figures as "VBOARD figure ..." lines. Exit 0 only
# when every scenario passed.
#
# Everything waits by polling for a condition with a deadline. Sleeps appear only
# where time itself is the stimulus (how long the button is held, a poll's interval).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
deb=$(realpath "$1")
host_linnet=$(realpath "$2")
shift 2
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(provision tool call wake watchdog card netem powercut upgrade)

work=$repo/build/vboard
rm -rf "$work"
mkdir -p "$work"
t_all=$(date +%s.%N)

say() { echo "vboard: $*" >&2; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# Figures are collected in a file (scenarios run in subshells) and printed at the end.
figure() { echo "VBOARD figure $*" >> "$work/figures"; }

# --- The image ----------------------------------------------------------------------
# The board's disk is the SD card image users flash (board/image/build.sh), made from
# the package under test; the harness's own parts (gpio-sim.ko, its ssh key) come from
# image.sh's cache and reach the board as a user's would: the key through the card.
entry=$("$here/image.sh")
t_image=$(now)
"$repo/board/image/build.sh" "$deb" "$work/image.img" > "$work/image-build.out" 2> "$work/image-build.log" \
  || { tail -n 30 "$work/image-build.log" >&2; echo "VBOARD FAIL image: board/image/build.sh failed"; exit 1; }
figure "image_step_seconds $(elapsed "$t_image") (the package on the image's cached Debian root, partitions, disk)"
sed -n 's/^BENCH //p' "$work/image-build.out" | while read -r l; do figure "$l"; done
figure "image_raw_bytes $(stat -c %s "$work/image.img") ($(du -m "$work/image.img" | cut -f1) MB allocated)"
mv "$work/image.img" "$work/disk.img"
fat="$work/disk.img@@4M"
kernel=$(mdir -b -i "$fat" ::/ | sed -n 's#^::/\(vmlinuz-.*\)#\1#p' | head -n 1)
initrd=$(mdir -b -i "$fat" ::/ | sed -n 's#^::/\(initrd.img-.*\)#\1#p' | head -n 1)
[ "$kernel" = "vmlinuz-$(cat "$entry/kabi")" ] || { echo "VBOARD FAIL image: kernel on the card is '$kernel', gpio-sim is built for $(cat "$entry/kabi")"; exit 1; }
mcopy -i "$fat" "::/$kernel" "$work/vmlinuz"
mcopy -i "$fat" "::/$initrd" "$work/initrd.img"

# Provisioning through the boot partition, as a user or a fleet script does: the
# harness's key, a token (CR LF, as Notepad saves it), a Wi-Fi network, a host name.
token="sk-vboard-$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')"
passphrase="vboard passphrase $(od -An -tx1 -N4 /dev/urandom | tr -d ' \n')"
mkdir -p "$work/card"
printf '%s\r\n' "$token" > "$work/card/token.txt"
printf 'ssid = VBoard\npassphrase = %s\ncountry = GB\n' "$passphrase" > "$work/card/wifi.conf"
echo linnet-vboard > "$work/card/hostname"
cp "$entry/id_ed25519.pub" "$work/card/authorized_keys"
for f in token.txt wifi.conf hostname authorized_keys; do mcopy -o -i "$fat" "$work/card/$f" "::/$f"; done

# --- qemu ---------------------------------------------------------------------------
# qemu's pid and ssh port are kept in files too: a scenario runs in a subshell, and
# the power cut's second boot must be seen (and cleaned up) by the main shell.
qemu_pid=
answer_pid=
ssh_port=
load_vm() { qemu_pid=$(cat "$work/qemu.pid" 2>/dev/null || true); ssh_port=$(cat "$work/ssh.port" 2>/dev/null || true); }
cleanup() {
  load_vm
  [ -n "$qemu_pid" ] && kill -9 "$qemu_pid" 2>/dev/null || true
  [ -n "$answer_pid" ] && kill "$answer_pid" 2>/dev/null || true
  ssh -O exit -o ControlPath="$work/ssh.sock" x 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free local port for ssh (hostfwd); the guest reaches this host as 10.0.2.2.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

ssh_opts=(-i "$entry/id_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
          -o LogLevel=ERROR -o ConnectTimeout=10 -o BatchMode=yes
          -o ControlMaster=auto -o ControlPath="$work/ssh.sock" -o ControlPersist=600)
g() { ssh "${ssh_opts[@]}" -p "$ssh_port" root@127.0.0.1 "$@"; }
put() { scp -q "${ssh_opts[@]}" -P "$ssh_port" "$1" root@127.0.0.1:"$2"; }
get() { scp -q "${ssh_opts[@]}" -P "$ssh_port" root@127.0.0.1:"$1" "$2"; }

# poll SECONDS WHAT COMMAND...: runs COMMAND until it succeeds; fails after SECONDS.
poll() {
  local limit=$1 what=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  while ! "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$end" ]; then say "timed out after ${limit}s: $what"; return 1; fi
    [ -z "$qemu_pid" ] || kill -0 "$qemu_pid" 2>/dev/null || { say "qemu died: $what"; return 1; }
    sleep 0.5
  done
}

start_qemu() {
  local n=$1
  ssh_port=$(free_port)
  rm -f "$work/ssh.sock"
  # cortex-a72 (the Pi 4's core) rather than -cpu max: TCG emulates max's pointer
  # authentication in software, which costs much of the guest's speed.
  qemu-system-aarch64 -M virt -cpu cortex-a72 -smp 2 -m 1024 -accel tcg,thread=multi \
    -kernel "$work/vmlinuz" -initrd "$work/initrd.img" \
    -append "root=LABEL=LINNETROOT rw console=ttyAMA0 net.ifnames=0 quiet" \
    -drive file="$work/disk.img",if=none,id=disk,format=raw -device virtio-blk-pci,drive=disk \
    -netdev user,id=net,hostfwd=tcp:127.0.0.1:"$ssh_port"-:22 -device virtio-net-pci,netdev=net,romfile= \
    -device virtio-rng-pci \
    -display none -monitor none -serial file:"$work/console-$n.log" &
  qemu_pid=$!
  # Reaped by pid polling, not `wait`: the shell would report the power cut's kill.
  disown "$qemu_pid"
  echo "$qemu_pid" > "$work/qemu.pid"
  echo "$ssh_port" > "$work/ssh.port"
  boot_t0=$(now)
}

boot() {
  local n=$1
  start_qemu "$n"
  local t=$boot_t0
  poll 240 "boot $n: ssh" g true || { tail -n 30 "$work/console-$n.log" >&2; return 1; }
  # ssh answers before the boot is over: wait for systemd to say it is (a failed unit
  # makes it "degraded", named in the log, not a failed boot).
  poll 120 "boot $n: multi-user" booted || return 1
  g 'systemctl --failed --no-legend' | sed "s/^/vboard: boot $n: failed unit: /" >&2 || true
  boot_seconds=$(elapsed "$t")
  figure "boot_seconds_$n $boot_seconds"
}

booted() { case "$(g 'systemctl is-system-running' || true)" in running|degraded) return 0 ;; *) return 1 ;; esac; }
power_cut() {
  local pid=$qemu_pid
  qemu_pid=; rm -f "$work/qemu.pid"
  kill -9 "$pid"
  poll 10 "qemu gone" bash -c "! kill -0 $pid"
}

# --- The host's peer ----------------------------------------------------------------
# The guest offers (it is behind qemu's NAT: the host reaches it only through
# hostfwd); the answerer listens on loopback and advertises 10.0.2.2, the address qemu
# maps to this host's loopback (answer --advertise).
start_answer() {
  : > "$work/answer.log"
  "$host_linnet" answer --listen 127.0.0.1:0 --advertise 10.0.2.2 --mode echo \
    > "$work/answer.out" 2>> "$work/answer.log" &
  answer_pid=$!
  poll 20 "answer READY" grep -q '^READY' "$work/answer.out"
  answer_port=$(sed -n 's/^READY \([0-9]*\).*/\1/p' "$work/answer.out")
}

# --- Guest helpers --------------------------------------------------------------------
status_field() { g "cat /run/linnet/status.json 2>/dev/null" | python3 -c "import json,sys; print(json.load(sys.stdin).get('$1'))" 2>/dev/null; }
connected() { [ "$(status_field state)" = connected ]; }
main_pid() { g 'systemctl show -p MainPID --value linnet'; }
active() { [ "$(g 'systemctl is-active linnet')" = active ]; }
new_main_pid() { local p; p=$(main_pid) && [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$1" ]; }
# The running service has written its first stats line (stats-seconds 5): a settled
# call, past the start's first page faults and the journal's burst, to be talked to.
first_stats() {
  local pid
  pid=$(main_pid)
  poll 30 "$1" g "journalctl _PID=$pid -o cat --no-pager | grep -q 'stats: '"
}
card_gone() { g 'cat /proc/asound/cards' > "$work/cards" && ! grep -q Loopback "$work/cards"; }

# One push-to-talk exchange, driven inside the guest so its timing does not depend on
# ssh: a tone plays into the microphone side of the loopback the whole time, the
# button is released / held / released / held / released (PHASE seconds each), what
# the speaker plays (the host's echo of what it heard) is recorded, and the LED line is
# sampled every 50 ms. The host then measures each phase (judge.py).
ptt_exchange() {
  local name=$1 phase=${2:-4}
  g "/usr/local/sbin/vboard-ptt.sh $phase /root/$name" > "$work/$name.marks"
  get "/root/$name.wav" "$work/$name.wav"
  get "/root/$name.led" "$work/$name.led"
  python3 "$here/judge.py" "$work/$name.wav" "$work/$name.marks" "$work/$name.led" > "$work/$name.judge"
}

# --- Scenarios ----------------------------------------------------------------------
config() {
  cat <<CONF
# The virtual board: the AIY Voice HAT profile's button and LED
# (/usr/share/linnet/board/aiy-voice-hat/linnet.conf) on gpio-sim, snd-aloop for sound,
# the host's answerer over WHIP.
whip = http://10.0.2.2:$answer_port/whip
capture = default
playback = default
rate = 48000
ptt = GPIO23
ptt-mode = hold
leds = GPIO25
# The emulated board is some ten times slower than a Pi 4 (TCG): Opus at complexity 10
# took a whole emulated core and the watchdog fired mid-call. The README's advice for
# the slowest board (the Zero 2 W) is 5 or lower.
complexity = 3
# Holds in the test are longer than the 3 s that would end the session.
ptt-long-press-ms = 0
# The loopback has no acoustic path from speaker to microphone: nothing to cancel, and
# the canceller would otherwise learn the echoed tone as the room.
aec = off
events = /run/linnet/events.jsonl
stats-seconds = 5
status-file = /run/linnet/status.json
log-level = info
CONF
}

sc_provision() {
  # The image's package is the one under test.
  local want have
  want=$(dpkg-deb -f "$deb" Version)
  have=$(g "dpkg-query -W -f '\${Version}' linnet")
  [ "$have" = "$want" ] || { say "the image has linnet $have, the package under test is $want"; return 1; }
  g 'linnet selftest' > "$work/selftest.log" 2>&1 || { cat "$work/selftest.log"; return 1; }
  # What the card provisioned at first boot (linnet-provision.service).
  [ "$(g 'systemctl show -p Result --value linnet-provision')" = success ] \
    || { g 'systemctl status --no-pager linnet-provision' >&2; return 1; }
  [ "$(g 'cat /etc/linnet/token; stat -c %a:%U /etc/linnet/token')" = "$token"$'\n'"600:root" ] \
    || { say "token not installed as the card's, 0600 root"; return 1; }
  [ "$(g hostname)" = linnet-vboard ] || { say "hostname: $(g hostname)"; return 1; }
  [ "$(g 'stat -c %a /etc/NetworkManager/system-connections/linnet-wifi-1.nmconnection')" = 600 ] \
    && g 'grep -q "^ssid=VBoard$" /etc/NetworkManager/system-connections/linnet-wifi-1.nmconnection' \
    || { say "no NetworkManager profile 0600 for the card's wifi.conf"; return 1; }
  # The card as anyone who takes it out would read it: the files gone, the report
  # there, and neither secret in the FAT partition's raw bytes (read around the page
  # cache: what is on the disk).
  g 'ls /boot/firmware' > "$work/card.ls"
  local f
  for f in token.txt wifi.conf hostname authorized_keys; do
    ! grep -qx "$f" "$work/card.ls" || { say "$f still on the card"; return 1; }
  done
  grep -qx linnet-firstboot.txt "$work/card.ls" || { say "no linnet-firstboot.txt on the card"; return 1; }
  local found
  found=$(g "dd if=/dev/disk/by-label/RASPIFIRM bs=1M iflag=direct status=none | grep -a -c -F -e '$token' -e '$passphrase'" || true)
  [ "$found" = 0 ] || { say "a secret is still in the FAT partition's raw bytes ($found lines)"; return 1; }
  g 'cat /boot/firmware/linnet-firstboot.txt' | tr -d '\r' > "$work/linnet-firstboot.txt"
  # The path a Raspberry Pi OS user takes, on this running board: the package purged
  # and installed again with apt (preinst makes the groups before udevd reads the
  # package's rule; postinst adds linnet to them). Purge removes /etc/linnet: the
  # card's token is put back as it was.
  put "$deb" /root/linnet.deb
  g 'cp -a /etc/linnet/token /root/token.keep && export DEBIAN_FRONTEND=noninteractive \
     && apt-get purge -y -q linnet && ! getent passwd linnet && apt-get install -y -q /root/linnet.deb \
     && cp -a /root/token.keep /etc/linnet/token && rm /root/token.keep && linnet selftest' > "$work/install.log" 2>&1 \
    || { tail -n 20 "$work/install.log" >&2; say "purge and apt install on the running board failed"; return 1; }
  # The bench's wiring, which a real board has as hardware: snd-aloop for the sound
  # card and gpio-sim (out of tree) for the button's and LED's chip, loaded at boot.
  put "$entry/gpio-sim/gpio-sim.ko" /root/gpio-sim.ko
  g "install -D -m 644 /root/gpio-sim.ko /lib/modules/$(cat "$entry/kabi")/extra/gpio-sim.ko && depmod -a $(cat "$entry/kabi") \
     && printf 'snd-aloop\ngpio-sim\n' > /etc/modules-load.d/vboard.conf && modprobe snd-aloop && modprobe gpio-sim"
  # The microphone's sound: 40 s of 440 Hz at -6 dBFS (guest/vboard-ptt.sh plays it).
  python3 - "$work/tone.wav" <<'PY'
import math, struct, sys, wave
w = wave.open(sys.argv[1], "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(48000)
a = 32767 * 10 ** (-6 / 20)
w.writeframes(b"".join(struct.pack("<h", int(a * math.sin(2 * math.pi * 440 * i / 48000))) for i in range(48000 * 40)))
PY
  put "$work/tone.wav" /root/tone.wav
  put "$here/guest/asound.conf" /etc/asound.conf
  put "$here/guest/vboard-gpio.sh" /usr/local/sbin/vboard-gpio.sh
  put "$here/guest/vboard-ptt.sh" /usr/local/sbin/vboard-ptt.sh
  put "$here/guest/vboard-gpio.service" /etc/systemd/system/vboard-gpio.service
  g 'chmod +x /usr/local/sbin/vboard-*.sh && systemctl daemon-reload && systemctl enable -q --now vboard-gpio.service'
  config > "$work/linnet.conf"
  put "$work/linnet.conf" /etc/linnet/linnet.conf
  # The chip's node belongs to the gpio group through the package's udev rule.
  g 'ls -l /dev/gpiochip*' > "$work/gpiochips"
  grep -q ' root gpio ' "$work/gpiochips" || { say "gpiochip not in group gpio: $(cat "$work/gpiochips")"; return 1; }
  # check, run as root, drops to linnet: the button must be usable as that user.
  local rc=0
  g 'linnet check' > "$work/check.log" 2>&1 || rc=$?
  cat "$work/check.log" >&2
  [ "$rc" = 0 ] || { say "linnet check exited $rc"; return 1; }
  grep -E '^ *ptt' "$work/check.log" | grep -q -w ok || { say "check: ptt not ok"; return 1; }
  echo "linnet $have in the image; selftest ok; purged and installed again with apt; the card's token (0600 root), host name and Wi-Fi installed, the four files and both secrets gone from the FAT's raw bytes; gpiochip root:gpio; check exit 0 as linnet, $(grep -E '^ *ptt' "$work/check.log" | head -n 1 | tr -s ' ')"
}

sc_call() {
  # The image enables the service; it has waited for its route since boot.
  g 'systemctl enable -q linnet && systemctl restart linnet'
  poll 90 "service connected" connected || { g 'journalctl -u linnet -n 40 --no-pager' >&2; return 1; }
  ptt_exchange call 4 || { cat "$work/call.judge" >&2; return 1; }
  cat "$work/call.judge"
  # journald's structured fields (Linnet's native journal entries): a fleet's
  # `journalctl MESSAGE_ID=…` finds the state changes and the session starts, with the
  # state and session as fields, and each such line is in the journal once.
  g 'journalctl -b -u linnet -o json --no-pager' > "$work/call.journal.json" 2>/dev/null || true
  python3 - "$work/call.journal.json" <<'PY' || return 1
import json, sys
entries = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
state = [e for e in entries if e.get("MESSAGE_ID") == "0e2cd5e273cb4042ac189835bf4db46b"]
starts = [e for e in entries if e.get("MESSAGE_ID") == "dbaec74cf13a46d88e2db77b38f60a7e"]
connected = [e for e in state if e.get("LINNET_STATE") == "connected" and e.get("LINNET_SESSION")]
plain = [e for e in entries if e.get("MESSAGE") == "session connected" and "MESSAGE_ID" not in e]
ok = bool(connected) and any(e.get("LINNET_REASON") == "initial" for e in starts) and not plain
print(f"journal: {len(state)} state changes with MESSAGE_ID (connected in session {connected[0]['LINNET_SESSION'] if connected else '-'}), "
      f"{len(starts)} session starts ({', '.join(e.get('LINNET_REASON', '?') for e in starts)}), {len(plain)} without fields")
sys.exit(0 if ok else 1)
PY
}

sc_wake() {
  # Hands-free on the board: the package's okay_nabu beside the button. The loopback's
  # microphone side hears a second of silence, "okay nabu", a pause, "turn on the
  # kitchen light" and silence (Tests/Wake/reference.py hands-free); its speaker side is
  # recorded. The service must wake, play the earcon, and send the request but not the
  # wake word, which went to a closed microphone: the answerer echoes what it hears.
  local py t0
  py=$("$repo/Tests/Speech/setup.sh" 2>/dev/null | tail -n 1)
  "$py" "$repo/Tests/Wake/reference.py" hands-free "$work/hands-free.wav"
  put "$work/hands-free.wav" /root/hands-free.wav
  { config; echo "wake-word = okay_nabu"; } > "$work/linnet-wake.conf"
  put "$work/linnet-wake.conf" /etc/linnet/linnet.conf
  # check's wake line: the model loaded as run loads it (the running service holds the
  # sound card and the button meanwhile, so check's own exit status says so).
  g 'linnet check' > "$work/wake-check.log" 2>&1 || true
  grep -q '^ *wake: ok, /usr/share/linnet/wake/okay_nabu.tflite: ' "$work/wake-check.log" \
    || { cat "$work/wake-check.log" >&2; say "check: the wake model not ok"; return 1; }
  g 'systemctl restart linnet'
  poll 90 "connected with the wake word" connected || return 1
  first_stats "the service's first stats line" || return 1
  t0=$(g 'date +%s')
  g 'arecord -q -D plughw:CARD=Loopback,DEV=1,SUBDEV=1 -f S16_LE -r 48000 -c 1 -d 14 /root/wake-heard.wav & r=$!; aplay -q -D plughw:CARD=Loopback,DEV=0,SUBDEV=0 /root/hands-free.wav; wait $r'
  get /root/wake-heard.wav "$work/wake-heard.wav"
  g "journalctl -u linnet --since @$t0 -o cat --no-pager" > "$work/wake.journal"
  grep -q 'wake word (score' "$work/wake.journal" || { tail -n 20 "$work/wake.journal" >&2; say "no wake in the journal"; return 1; }
  python3 - "$work/wake-heard.wav" > "$work/wake.judge" <<'PY' || { cat "$work/wake.judge" >&2; return 1; }
import math, struct, sys, wave
w = wave.open(sys.argv[1])
rate, n = w.getframerate(), w.getnframes()
x = [v / 32768 for v in struct.unpack("<%dh" % n, w.readframes(n))]
win = rate // 50  # 20 ms
def tone(seg, hz):
    k = 2 * math.cos(2 * math.pi * hz / rate); s1 = s2 = 0.0
    for v in seg:
        s1, s2 = v + k * s1 - s2, s1
    return 2 * math.sqrt(max(s1 * s1 + s2 * s2 - k * s1 * s2, 0)) / len(seg)
def rms(seg): return math.sqrt(sum(v * v for v in seg) / len(seg)) if seg else 0
starts = range(0, n - win, win // 2)
e6 = [tone(x[i:i + win], 1318.5) for i in starts]
b6 = [tone(x[i:i + win], 1975.5) for i in starts]
first = next((j for j, a in enumerate(e6) if a > 0.05), None)
if first is None:
    print(f"no earcon (1318.5 Hz at most {max(e6):.3f} of full scale)"); sys.exit(1)
at = first * win / 2 / rate
before = rms(x[: max(0, first * win // 2 - rate // 20)])
after = [rms(x[i:i + rate // 2]) for i in range(first * win // 2 + rate // 5, n - rate // 2, rate // 10)]
loudest = max(after) if after else 0
db = lambda v: 20 * math.log10(max(v, 1e-9))
ok = max(b6) > 0.05 and db(before) < -50 and db(loudest) > -40
print(f"earcon at {at:.2f} s (E6 {max(e6):.2f}, B6 {max(b6):.2f} of full scale); before it {db(before):.0f} dBFS (the wake word not sent); "
      f"the request's echo after it up to {db(loudest):.0f} dBFS" + ("" if ok else "; WRONG"))
sys.exit(0 if ok else 1)
PY
  # Back to the button alone for the scenarios after this one.
  put "$work/linnet.conf" /etc/linnet/linnet.conf
  g 'systemctl restart linnet'
  poll 90 "connected again without the wake word" connected || return 1
  echo "okay_nabu from the package: woke ($(grep -o 'wake word (score [0-9]* %)' "$work/wake.journal" | head -n 1)); $(cat "$work/wake.judge")"
}

sc_watchdog() {
  local pid before after
  pid=$(main_pid)
  before=$(g 'systemctl show -p NRestarts --value linnet')
  g "kill -STOP $pid"
  local t=$(now)
  poll 90 "a new main process" new_main_pid "$pid"
  local restart=$(elapsed "$t")
  poll 90 "connected after the restart" connected || return 1
  after=$(g 'systemctl show -p NRestarts --value linnet')
  [ "$after" -gt "$before" ] || { say "NRestarts $before → $after"; return 1; }
  g "journalctl -u linnet --no-pager -n 200" > "$work/watchdog.journal"
  grep -q -i 'watchdog timeout' "$work/watchdog.journal" || { say "no watchdog timeout in the journal"; return 1; }
  echo "SIGSTOP pid $pid → systemd's watchdog timeout, new main pid after ${restart}s, connected again (NRestarts $before → $after)"
}

sc_card() {
  local before after state
  before=$(g 'systemctl show -p NRestarts --value linnet')
  g 'echo snd_aloop.0 > /sys/bus/platform/drivers/snd_aloop/unbind'
  local t=$(now)
  # The card is gone for 50 s: in the field each start exited at once ("no such
  # device") every ~4 s, and the unit's start limit (10 in 300 s) was hit in 40 s.
  poll 30 "the card gone" card_gone || return 1
  local end=$(( $(date +%s) + 50 )) failed=0
  while [ "$(date +%s)" -lt "$end" ]; do
    [ "$(g 'systemctl is-failed linnet' || true)" = failed ] && failed=1
    sleep 1
  done
  state="$(g 'systemctl is-active linnet' || true), status $(status_field state)"
  g 'echo snd_aloop.0 > /sys/bus/platform/drivers/snd_aloop/bind'
  local back=$(now)
  poll 90 "connected with the card back" connected || return 1
  after=$(g 'systemctl show -p NRestarts --value linnet')
  [ "$failed" = 0 ] || { say "the unit failed while the card was gone"; return 1; }
  [ "$(g 'systemctl show -p Result --value linnet')" != start-limit-hit ] || return 1
  # The service's side of the wait, kept for reading: a power cut later loses this boot's journal.
  g 'journalctl -b -u linnet --no-pager -o short-precise' > "$work/card.journal" 2>&1 || true
  ptt_exchange card 4 || { cat "$work/card.judge" >&2; return 1; }
  echo "card unbound 50 s (unit never failed; at the end: $state; restarts $before → $after), rebound: connected $(elapsed "$back") s later; $(cat "$work/card.judge")"
}

sc_netem() {
  g 'tc qdisc add dev eth0 root netem delay 80ms 30ms distribution normal loss 5%'
  g 'tc qdisc show dev eth0' > "$work/netem.qdisc"
  grep -q netem "$work/netem.qdisc" || return 1
  local rc=0
  ptt_exchange netem 4 || rc=$?
  connected || rc=1
  g 'tc qdisc del dev eth0 root'
  [ "$rc" = 0 ] || { cat "$work/netem.judge" >&2; return 1; }
  echo "netem $(sed -n 's/.*netem //p' "$work/netem.qdisc" | head -n 1): still connected; $(cat "$work/netem.judge")"
}

# What a power cut must never lose: the config, the token and what provisioning
# installed (unchanged), the package's files, the file systems, and the state, which
# may only grow (daily-usage.json's counters: Linnet writes it whole with fsync and
# rename; what it had written before the cut is there after) or stay well-formed
# (open-sessions.jsonl, the close URLs of sessions open at the cut).
fixed_files() { g 'sha256sum /etc/linnet/linnet.conf /etc/linnet/token /etc/NetworkManager/system-connections/linnet-wifi-1.nmconnection /etc/hostname /root/.ssh/authorized_keys /etc/asound.conf'; }
state_files() { g 'cat /var/lib/linnet/daily-usage.json 2>/dev/null || echo null; echo; echo ---; cat /var/lib/linnet/open-sessions.jsonl 2>/dev/null || true'; }
intact() {
  local label=$1 before_state=$2
  [ "$(fixed_files)" = "$fixed_before" ] || { say "$label: the config, token or a provisioned file changed"; return 1; }
  g 'dpkg --audit; dpkg -V linnet | grep -v " c /etc/linnet/linnet.conf$"' > "$work/powercut.dpkg" 2>&1 || true
  [ ! -s "$work/powercut.dpkg" ] || { say "$label: dpkg: $(head -n 3 "$work/powercut.dpkg")"; return 1; }
  ! g 'dmesg | grep -i -E "EXT4-fs (error|warning)|I/O error"' >&2 || { say "$label: file system errors (above)"; return 1; }
  state_files > "$work/state.after"
  python3 - "$before_state" "$work/state.after" <<'PY' || { say "$label: state lost or malformed: $(tr '\n' ' ' < "$work/state.after" | cut -c1-300)"; return 1; }
import json, sys
def parse(path):
    usage, _, opens = open(path).read().partition("\n---\n")
    return json.loads(usage), [json.loads(l) for l in opens.splitlines() if l.strip()]
def numbers(v, key=""):
    if isinstance(v, bool): return {}
    if isinstance(v, (int, float)): return {key: v}
    if isinstance(v, dict): return {k2: n for k, x in v.items() for k2, n in numbers(x, key + "/" + k).items()}
    return {}
(u0, _), (u1, o1) = parse(sys.argv[1]), parse(sys.argv[2])
if u0 is not None:
    assert u1 is not None, "daily-usage.json gone"
    same_day = u0.get("day") == u1.get("day") if isinstance(u0, dict) and isinstance(u1, dict) else True
    if same_day:
        n0, n1 = numbers(u0), numbers(u1)
        for k, v in n0.items():
            assert k in n1 and n1[k] >= v, f"{k}: {v} before the cut, {n1.get(k)} after"
PY
}

sc_powercut() {
  # Cuts at random moments of a call and of a boot: a cut mid-call, then either a
  # whole boot or a second cut at a random moment of that boot (kernel, fsck, journal
  # replay, first writes) and then a whole boot. After each whole boot: connected, and
  # nothing lost (intact). VBOARD_POWERCUTS cuts (20 by default, as CI runs it: about
  # 12 minutes), the moments from VBOARD_SEED (printed, to replay a failure).
  local cuts=${VBOARD_POWERCUTS:-20} seed=${VBOARD_SEED:-$((RANDOM * 32768 + RANDOM))}
  RANDOM=$seed
  say "power cuts: $cuts, seed $seed"
  fixed_before=$(fixed_files)
  local done=0 boots=0 moments=() up=() ms state_before="$work/state.before" boot_window
  # A boot's window: from power-on to connected, as the first cut's boot measures it.
  boot_window=60
  while [ "$done" -lt "$cuts" ]; do
    poll 90 "connected before cut $((done + 1))" connected || return 1
    state_files > "$state_before"
    ms=$(( RANDOM % 8000 ))
    sleep "$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 1000 }')"
    power_cut; done=$((done + 1)); moments+=("call+${ms}ms")
    if [ "$done" -lt "$cuts" ] && [ $(( RANDOM % 2 )) = 1 ]; then
      ms=$(( RANDOM % (boot_window * 1000) ))
      start_qemu "cut$done"
      sleep "$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 1000 }')"
      power_cut; done=$((done + 1)); moments+=("boot+${ms}ms")
    fi
    boots=$((boots + 1))
    boot "after-cut$done" || return 1
    poll 120 "connected after cut $done" connected || { g 'journalctl -b -u linnet -n 30 --no-pager' >&2; return 1; }
    local s; s=$(elapsed "$boot_t0")
    up+=("$s")
    [ "$boots" != 1 ] || boot_window=${s%.*}
    intact "after cut $done (${moments[*]: -1})" "$state_before" || return 1
  done
  ptt_exchange powercut 4 || { cat "$work/powercut.judge" >&2; return 1; }
  local sorted; sorted=$(printf '%s\n' "${up[@]}" | sort -n | tr '\n' ' ')
  figure "powercut_cuts $cuts (seed $seed): ${moments[*]}"
  figure "power_on_to_connected_seconds ${sorted}(median $(printf '%s\n' "${up[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'))"
  echo "$cuts power cuts (${moments[*]}; seed $seed): after each of $boots boots connected (power-on to connected ${sorted}s), config/token/provisioned files unchanged, usage counters kept, dpkg clean, no ext4 errors; $(cat "$work/powercut.judge")"
}

sc_tool() {
  # The README's door opener on the board's GPIO27 (gpio-sim line 2), run by hand as the
  # service's user: the line is sampled in the guest every 50 ms while the tool runs.
  cat > "$work/tools.json" <<'JSON'
{"tools": [{"name": "open_door", "description": "Opens the front door.", "gpio": {"line": "GPIO27", "pulse-ms": 3000}}]}
JSON
  put "$work/tools.json" /etc/linnet/tools.json
  g 'chmod 644 /etc/linnet/tools.json'
  g 'linnet check --tools /etc/linnet/tools.json' > "$work/tool-check.log" 2>&1 || true
  grep -q 'open_door: gpio GPIO27 pulse 3000 ms' "$work/tool-check.log" || { cat "$work/tool-check.log" >&2; say "check did not list the tool"; return 1; }
  local line
  line="$(g 'cat /run/vboard-gpio')/sim_gpio2/value"
  # The sampler is bash builtins only (forks are dear under TCG): the first and last
  # instant the line read high, and how many samples did.
  g "runuser -u linnet -- linnet tool open_door '{}' --tools /etc/linnet/tools.json < /dev/null > /root/tool.out 2>&1 & echo \$! > /root/tool.pid" >/dev/null
  g "bash -c 'exec 3<> <(:); p=\$(cat /root/tool.pid); first=; last=; h=0; n=0
       while kill -0 \$p 2>/dev/null; do read -r v < $line; n=\$((n+1))
         if [ \"\$v\" = 1 ]; then h=\$((h+1)); last=\$EPOCHREALTIME; [ -n \"\$first\" ] || first=\$EPOCHREALTIME; fi
         read -t 0.05 -u 3 || true; done
       read -r v < $line; echo \"\${first:-0} \${last:-0} \$h \$n \$v\"'" > "$work/tool.pulse"
  local first last high total after
  read -r first last high total after < "$work/tool.pulse"
  g 'cat /root/tool.out' > "$work/tool.out"
  grep -qx 'pulsed for 3000 ms' "$work/tool.out" || { cat "$work/tool.out" >&2; say "linnet tool did not say it pulsed"; return 1; }
  local span
  span=$(awk -v a="$first" -v b="$last" 'BEGIN { printf "%.2f", b - a }')
  # 3 s high (the samples' span is a little less), then low.
  awk -v s="$span" 'BEGIN { exit !(s >= 2.5 && s <= 3.5) }' && [ "$after" = 0 ] \
    || { say "pulse: high for $span s ($high of $total samples), $after after"; return 1; }
  # A tool on the button's line is refused before anything runs.
  echo '{"tools": [{"name": "bad", "description": "d", "gpio": {"line": "GPIO23", "pulse-ms": 100}}]}' > "$work/bad-tools.json"
  put "$work/bad-tools.json" /etc/linnet/bad-tools.json
  g 'chmod 644 /etc/linnet/bad-tools.json'
  ! g 'linnet check --tools /etc/linnet/bad-tools.json' > "$work/tool-bad.log" 2>&1 || { say "check passed a tool on the button's line"; return 1; }
  grep -q "GPIO23 is the push-to-talk button's line" "$work/tool-bad.log" || { cat "$work/tool-bad.log" >&2; return 1; }
  g 'rm /etc/linnet/bad-tools.json'
  echo "open_door as linnet: GPIO27 high for $span s of the 3 s pulse ($high of $total samples), low after; a tool on GPIO23 (the button) refused by check"
}

sc_upgrade() {
  # The same package with a higher version: what an update does to a running service.
  local tmp=$work/upgrade old new pid
  rm -rf "$tmp"; dpkg-deb -R "$deb" "$tmp"
  old=$(sed -n 's/^Version: //p' "$tmp/DEBIAN/control")
  new="$old+vboard1"
  sed -i "s/^Version: .*/Version: $new/" "$tmp/DEBIAN/control"
  dpkg-deb --root-owner-group -Zxz --build "$tmp" "$work/linnet_upgrade.deb" >/dev/null
  put "$work/linnet_upgrade.deb" /root/linnet_upgrade.deb
  pid=$(main_pid)
  local conf_before=$(g 'sha256sum /etc/linnet/linnet.conf')
  g 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q /root/linnet_upgrade.deb' > "$work/upgrade.log" 2>&1
  [ "$(g "dpkg-query -W -f '\${Version}' linnet")" = "$new" ] || return 1
  [ "$(main_pid)" != "$pid" ] || { say "the service was not restarted"; return 1; }
  poll 90 "connected after the upgrade" connected || return 1
  [ "$(g 'sha256sum /etc/linnet/linnet.conf')" = "$conf_before" ] || return 1
  # The exchange once the new process has sent its first stats line (stats-seconds 5):
  # started straight after `connected`, it ran while the emulated board was still
  # busiest with the start (the process's first page faults, dpkg's triggers, the
  # journal), and one CI run lost more of a held tone to playback stalls than the
  # judge allows (a stretch 1.2 s short). A device upgraded in the field is talked to
  # seconds later, not in the same second; the other scenarios judge a settled call too.
  first_stats "the new service's first stats line" || return 1
  ptt_exchange upgrade 4 || { cat "$work/upgrade.judge" >&2; return 1; }
  echo "$old → $new with the service running: restarted (pid $pid → $(main_pid)), config kept, connected; $(cat "$work/upgrade.judge")"
}

# --- Run ----------------------------------------------------------------------------
failed=0
failures=()
boot 1 || { echo "VBOARD FAIL boot: see $work/console-1.log"; exit 1; }
start_answer
for s in "${scenarios[@]}"; do
  set +e
  ( set -e; "sc_$s" ) > "$work/$s.result" 2> "$work/$s.err"
  rc=$?
  set -e
  load_vm
  if [ "$rc" = 0 ]; then
    echo "VBOARD PASS $s: $(tail -n 1 "$work/$s.result")"
  else
    echo "VBOARD FAIL $s: $(tail -n 3 "$work/$s.err" | tr '\n' ' ')"
    failures+=("VBOARD FAIL $s: $(tail -n 3 "$work/$s.err" | tr '\n' ' ')")
    failed=1
    # What the service said meanwhile, in CI's log too (a clean clone's build/vboard is
    # gone by the time anyone reads it): its last lines other than the stats, and the
    # last stats line (xruns, packets), on the clock of the marks (the guest's realtime).
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
      g 'journalctl -u linnet -o short-precise --no-pager --since -3min' > "$work/$s.journal" 2>&1 || true
      { grep -v ' stats: ' "$work/$s.journal" | tail -n 14; grep ' stats: ' "$work/$s.journal" | tail -n 1; } \
        | cut -c1-300 | sed "s/^/VBOARD journal $s: /"
      for f in "$work/$s".*marks; do [ -e "$f" ] || continue; sed "s/^/VBOARD marks $s: /" "$f"; done
    fi
    # A later scenario needs a working call: stop at the first failure of one.
    [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null || break
  fi
  if [ "$s" = call ] && [ "$rc" = 0 ]; then
    # The host's CPU for a 30 s call: qemu (the whole emulated board) and the answerer.
    cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
    # 30 s of the exchange (6 s phases): the button held half the time, the tone playing.
    q0=$(cpu "$qemu_pid"); a0=$(cpu "$answer_pid"); t0=$(now)
    ptt_exchange cpu 6 > /dev/null 2>&1 || true
    q1=$(cpu "$qemu_pid"); a1=$(cpu "$answer_pid")
    hz=$(getconf CLK_TCK)
    figure "call_30s_host_cpu_seconds qemu $(awk -v a="$q0" -v b="$q1" -v h="$hz" 'BEGIN { printf "%.1f", (b-a)/h }') answer $(awk -v a="$a0" -v b="$a1" -v h="$hz" 'BEGIN { printf "%.1f", (b-a)/h }') over $(elapsed "$t0") s (the exchange of 5 × 6 s, the button held 12 s of it, and copying its recording)"
  fi
done
g 'journalctl -b --no-pager' > "$work/journal.log" 2>/dev/null || true
figure "vboard_total_seconds $(elapsed "$t_all")"
cat "$work/figures"
# Again last: CI's record of a run keeps its tail, and the journal and marks printed
# after a failure would push the reason out of it.
for f in "${failures[@]}"; do echo "$f"; done
exit "$failed"
