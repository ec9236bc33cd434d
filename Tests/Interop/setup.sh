#!/bin/sh
# Makes (or reuses) the Python venv for the interop peer and installs its requirements.
# Idempotent: a stamp of the requirements and the interpreter skips pip when nothing
# changed. Usage: Tests/Interop/setup.sh [VENV_DIR]   (default: build/interop-venv)
# Prints the venv's python path as its last line.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${1:-"$root/build/interop-venv"}
req="$here/requirements.txt"

# Debian's python3 (3.11 on Debian 12) unless PYTHON says otherwise; a venv keeps the
# system site-packages untouched (no --break-system-packages needed).
python=${PYTHON:-}
if [ -z "$python" ]; then
    if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=python3; fi
fi

stamp="$venv/.linnet-interop-stamp"
want="$("$python" -c 'import sys; print(sys.version)' | head -n1) $(sha256sum "$req" | cut -d' ' -f1)"

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "interop venv up to date: $venv" >&2
    echo "$venv/bin/python"
    exit 0
fi

if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    # Debian splits venv/ensurepip into python3-venv.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing python3-venv" >&2
        apt-get install -y -q python3-venv >&2 || { apt-get update -q >&2 && apt-get install -y -q python3-venv >&2; }
    else
        echo "error: $python has no venv/ensurepip; install python3-venv" >&2
        exit 69
    fi
fi

if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv" >&2
fi
"$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req" >&2
"$venv/bin/python" -c 'import aiortc, numpy, av' >&2
echo "$want" > "$stamp"
echo "interop venv ready: $venv" >&2
echo "$venv/bin/python"
