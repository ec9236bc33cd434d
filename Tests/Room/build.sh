#!/bin/sh
# Builds the room simulator (ALSA external PCM plugin) and its self-check:
#   build/room/libasound_module_pcm_linnetroom.so   (type linnetroom)
#   build/room/roomcheck                            (delay-contract check, see README.md)
# Needs gcc and libasound2-dev (installed with apt-get when run as root and missing).
# Usage: Tests/Room/build.sh [OUT_DIR]   Prints the plugin's absolute path as its last line.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-"$root/build/room"}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [ ! -f /usr/include/alsa/pcm_ioplug.h ] || ! command -v gcc >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing gcc libasound2-dev" >&2
        apt-get install -y -q gcc libasound2-dev >&2 || { apt-get update -q >&2 && apt-get install -y -q gcc libasound2-dev >&2; }
    else
        echo "error: need gcc and libasound2-dev (apt-get install gcc libasound2-dev)" >&2
        exit 69
    fi
fi

# Paths are bounded by PATH_MAX and snprintf truncates safely: -Wformat-truncation off.
cflags="-O2 -g -Wall -Wextra -Werror -Wno-format-truncation -std=gnu11"
so="$out/libasound_module_pcm_linnetroom.so"
if [ ! -f "$so" ] || [ "$here/linnetroom.c" -nt "$so" ] || [ "$0" -nt "$so" ]; then
    # -DPIC: alsa-lib's SND_PCM_PLUGIN_SYMBOL then exports the versioned entry a dlopen()ed
    # plugin needs (without it, it refers to the static-build table snd_dlsym_start).
    gcc $cflags -fPIC -DPIC -shared -o "$so.tmp" "$here/linnetroom.c" -lasound -lm -lpthread
    mv "$so.tmp" "$so"
    echo "built $so" >&2
fi
chk="$out/roomcheck"
if [ ! -f "$chk" ] || [ "$here/roomcheck.c" -nt "$chk" ]; then
    gcc $cflags -o "$chk.tmp" "$here/roomcheck.c" -lasound -lm
    mv "$chk.tmp" "$chk"
    echo "built $chk" >&2
fi
echo "$so"
