#!/bin/sh
# Makes (or reuses) the Python venv for the speech judges and installs their
# requirements; installs espeak-ng (the voices) with apt-get when it is missing and we
# are root, saying so. Idempotent: a stamp of the requirements and the interpreter skips
# pip when nothing changed. Modelled on Tests/Interop/setup.sh.
# Usage: Tests/Speech/setup.sh [VENV_DIR]   (default: build/speech-venv)
# Prints the venv's python path as its last line.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${1:-"$root/build/speech-venv"}
req="$here/requirements.txt"

apt_install() {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing $* with apt-get" >&2
        apt-get install -y -q "$@" >&2 || { apt-get update -q >&2 && apt-get install -y -q "$@" >&2; }
    else
        echo "error: need $* (apt-get install $*)" >&2
        exit 69
    fi
}

command -v espeak-ng >/dev/null || apt_install espeak-ng

python=${PYTHON:-}
if [ -z "$python" ]; then
    if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=python3; fi
fi
stamp="$venv/.linnet-speech-stamp"
want="$("$python" -c 'import sys; print(sys.version)' | head -n1) $(sha256sum "$req" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "speech venv up to date: $venv" >&2
    echo "$venv/bin/python"
    exit 0
fi
"$python" -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv" >&2
fi
"$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req" >&2
"$venv/bin/python" -c 'import pocketsphinx, numpy, pymicro_wakeword, pymicro_features; pocketsphinx.get_model_path()' >&2
echo "$want" > "$stamp"
echo "speech venv ready: $venv" >&2
echo "$venv/bin/python"
