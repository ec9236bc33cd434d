#!/usr/bin/env bash
# The wake-word models the package carries (/usr/share/linnet/wake): the four
# microWakeWord models of pymicro-wakeword 2.5.0, taken from its source archive on PyPI
# and pinned by that archive's sha256, as Opus and speexdsp come from Debian's source
# packages. The models are Apache-2.0 (the archive's LICENSE, copied beside them and
# named in the package's copyright file).
#
# Usage: scripts/fetch-wake-models.sh [OUT_DIR]   (default build/third_party/wake)
# Idempotent: a folder already made from the same archive is kept; concurrent calls are
# serialised by a lock beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/third_party/wake}
name=pymicro_wakeword-2.5.0
sha=2355c1cb3fbfe4a59f4eccd6f17bd3eca260f7c6fb701fe3c44ccc98d49dd19e
models="okay_nabu hey_jarvis alexa hey_mycroft"
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$sha" ]; then exit 0; fi
# Tests running side by side may all ask at once: one fetches, the others wait for it.
mkdir -p "$(dirname "$out")"
exec 9> "$out.lock"
flock 9
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$sha" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$out.new"' EXIT
# The archive's address from PyPI's simple index (PEP 503): the link that carries this
# sha256, so a file replaced under the same name is refused, not used.
python3 - "$name.tar.gz" "$sha" "$tmp/$name.tar.gz" <<'PY'
import hashlib, re, sys, urllib.request
name, sha, dest = sys.argv[1:4]
index = "https://pypi.org/simple/pymicro-wakeword/"
try:
    html = urllib.request.urlopen(index, timeout=60).read().decode()
except OSError as e:
    sys.exit(f"fetch-wake-models: {index}: {e}")
links = re.findall(r'href="(https://[^"#]*/' + re.escape(name) + r')#sha256=' + sha + '"', html)
if not links:
    sys.exit(f"fetch-wake-models: {name} with sha256 {sha} is not on {index}")
try:
    data = urllib.request.urlopen(links[0], timeout=120).read()
except OSError as e:
    sys.exit(f"fetch-wake-models: {links[0]}: {e}")
got = hashlib.sha256(data).hexdigest()
if got != sha:
    sys.exit(f"fetch-wake-models: {name} has sha256 {got}, not {sha}: refused")
open(dest, "wb").write(data)
PY
tar -xzf "$tmp/$name.tar.gz" -C "$tmp" "$name/LICENSE" "$name/pymicro_wakeword/models"
rm -rf "$out.new"
mkdir -p "$out.new"
for m in $models; do
  cp "$tmp/$name/pymicro_wakeword/models/$m.tflite" "$tmp/$name/pymicro_wakeword/models/$m.json" "$out.new/"
done
cp "$tmp/$name/LICENSE" "$out.new/LICENSE"
echo "$sha" > "$out.new/.stamp"
rm -rf "$out"
mv "$out.new" "$out"
echo "wake models ($name, sha256 ${sha:0:12}…) → $out" >&2
