#!/bin/sh
# The board's wiring, made at every boot (configfs does not survive one): a gpio-sim
# chip with the AIY Voice HAT profile's lines, the button GPIO23 and its LED GPIO25, and GPIO27 for a tool
# (board/aiy-voice-hat/linnet.conf). The button is wired to ground with a pull-up:
# released reads high, pressed low (vboard.sh presses it by writing "pull-down" to the
# line's sysfs `pull`).
set -eu
modprobe gpio-sim
d=/sys/kernel/config/gpio-sim/vboard
[ -d "$d" ] && exit 0
mkdir "$d" "$d/gpio-bank0"
echo 3 > "$d/gpio-bank0/num_lines"
mkdir "$d/gpio-bank0/line0" "$d/gpio-bank0/line1" "$d/gpio-bank0/line2"
echo GPIO23 > "$d/gpio-bank0/line0/name"
echo GPIO25 > "$d/gpio-bank0/line1/name"
# A door strike for the gpio tool (README's example): free for tools.
echo GPIO27 > "$d/gpio-bank0/line2/name"
echo 1 > "$d/live"
dev=$(cat "$d/dev_name")
chip=$(cat "$d/gpio-bank0/chip_name")
echo pull-up > "/sys/devices/platform/$dev/$chip/sim_gpio0/pull"
# Where vboard.sh finds the lines.
echo "/sys/devices/platform/$dev/$chip" > /run/vboard-gpio
# The package's udev rule gives the chip's node to the gpio group; wait for udev to
# have handled the new chip so the service never races it.
udevadm settle
