#!/usr/bin/env python3
"""Regenerates gstreamer-answer.sdp: GStreamer webrtcbin answering linnet-offer.sdp.

Needs Debian's python3-gi, gir1.2-gst-plugins-bad-1.0, gstreamer1.0-plugins-bad,
gstreamer1.0-nice, gstreamer1.0-plugins-base/-good and libopus (tested with 1.22.0).
Run from this directory with the system python: /usr/bin/python3 gen_gstreamer.py
"""
import pathlib
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstWebRTC", "1.0")
gi.require_version("GstSdp", "1.0")
from gi.repository import GLib, Gst, GstSdp, GstWebRTC  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
Gst.init(None)

pipeline = Gst.parse_launch(
    "webrtcbin name=w bundle-policy=max-bundle "
    "audiotestsrc is-live=true wave=silence ! audioconvert ! audioresample ! opusenc ! "
    "rtpopuspay pt=111 ! application/x-rtp,media=audio,encoding-name=OPUS,payload=111 ! w."
)
w = pipeline.get_by_name("w")
loop = GLib.MainLoop()
state = {"answered": False}


def finish_if_gathered(*_):
    if state["answered"] and w.get_property("ice-gathering-state") == GstWebRTC.WebRTCICEGatheringState.COMPLETE:
        sdp = w.get_property("local-description").sdp.as_text()
        (HERE / "gstreamer-answer.sdp").write_bytes(sdp.encode())
        print("wrote gstreamer-answer.sdp", len(sdp), "bytes")
        loop.quit()


def on_answer(promise, _):
    reply = promise.get_reply()
    answer = reply.get_value("answer")
    state["answered"] = True
    w.emit("set-local-description", answer, Gst.Promise.new())
    GLib.timeout_add(200, lambda: (finish_if_gathered(), True)[1])


def on_remote_set(promise, _):
    w.emit("create-answer", None, Gst.Promise.new_with_change_func(on_answer, None))


offer_text = (HERE / "linnet-offer.sdp").read_text()
ok, msg = GstSdp.SDPMessage.new_from_text(offer_text)
if ok != GstSdp.SDPResult.OK:
    sys.exit("could not parse the offer")
offer = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.OFFER, msg)
w.connect("notify::ice-gathering-state", finish_if_gathered)
pipeline.set_state(Gst.State.PLAYING)
w.emit("set-remote-description", offer, Gst.Promise.new_with_change_func(on_remote_set, None))
GLib.timeout_add_seconds(20, lambda: (print("timed out", file=sys.stderr), loop.quit()))
loop.run()
pipeline.set_state(Gst.State.NULL)
