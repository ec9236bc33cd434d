#!/bin/sh
# Makes the GStreamer interop peer (gst_peer.py) runnable: Debian 12's GStreamer 1.22
# with webrtcbin, libnice and their GObject-introspection data, driven by Debian's own
# /usr/bin/python3 (no venv: `gi` is a Debian package, not a PyPI one here).
# Installs the missing packages when run as root, then checks that every module and
# element the peer uses is there. Idempotent; about 0.3 s when all is present.
# Usage: Tests/Interop/gst-setup.sh     (GST_PYTHON=… to check another interpreter)
# Prints the python path as its last line; exit 69 when something cannot be had.
set -eu

python=${GST_PYTHON:-/usr/bin/python3}

# python3-gi, python3-gst-1.0: the bindings and GStreamer's overrides for them;
# gir1.2-*: the typelibs of Gst, GstSdp (base), GstWebRTC (bad) and Nice (libnice's own
# API, used to make webrtcbin gather on loopback); the plugins: webrtcbin, dtls, srtp and
# sctp (bad), nicesrc/nicesink (nice), rtpopuspay/depay (good), opusenc/opusdec,
# audiotestsrc, appsrc/appsink (base).
packages="python3-gi python3-gst-1.0 gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0
gir1.2-gst-plugins-bad-1.0 gir1.2-nice-0.1 gstreamer1.0-nice gstreamer1.0-plugins-base
gstreamer1.0-plugins-good gstreamer1.0-plugins-bad"

missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        n=$(echo $missing | wc -w)
        echo "installing $n packages…" >&2
        install() {
            # shellcheck disable=SC2086
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                -o DPkg::Lock::Timeout=300 $missing >&2
        }
        install || { apt-get update -q -o DPkg::Lock::Timeout=300 >&2 && install; }
    else
        echo "error: missing Debian packages:$missing (run this as root to install them)" >&2
        exit 69
    fi
fi

"$python" - >&2 <<'CHECK' || { echo "error: the GStreamer peer cannot run with $python" >&2; exit 69; }
import sys
import gi
for namespace, version in (("Gst", "1.0"), ("GstWebRTC", "1.0"), ("GstSdp", "1.0"), ("Nice", "0.1")):
    gi.require_version(namespace, version)
from gi.repository import Gst, GstWebRTC, GstSdp, Nice  # noqa: F401
Gst.init(None)
elements = ("webrtcbin", "nicesrc", "nicesink", "opusenc", "opusdec", "rtpopuspay", "rtpopusdepay",
            "audiotestsrc", "appsrc", "appsink", "dtlssrtpenc", "sctpenc", "audioconvert", "audioresample")
missing = [e for e in elements if Gst.ElementFactory.find(e) is None]
if missing:
    sys.exit("missing GStreamer elements: " + ", ".join(missing))
print("gst peer ready: GStreamer %s" % Gst.version_string().split()[-1])
CHECK
echo "$python"
