#!/usr/bin/env python3
"""Regenerates the aiortc fixtures (pip install aiortc; tested with aiortc 1.16.0).

  aiortc-answer.sdp  aiortc answering linnet-offer.sdp (our builder's offer)
  aiortc-offer.sdp   aiortc offering audio (with a track) plus a data channel

Run from this directory: python3 gen_aiortc.py
"""
import asyncio
import pathlib

from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import AudioStreamTrack

HERE = pathlib.Path(__file__).resolve().parent


def write(name, sdp):
    # aiortc writes CRLF already; keep the bytes exactly as it produced them.
    (HERE / name).write_bytes(sdp.encode())
    print("wrote", name, len(sdp), "bytes")


async def answer():
    offer = (HERE / "linnet-offer.sdp").read_text()
    pc = RTCPeerConnection()
    await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
    # Attach a track so aiortc answers sendrecv, as it would in an echo call.
    for t in pc.getTransceivers():
        if t.kind == "audio":
            pc.addTrack(AudioStreamTrack())
    await pc.setLocalDescription(await pc.createAnswer())  # gathers candidates
    write("aiortc-answer.sdp", pc.localDescription.sdp)
    await pc.close()


async def offer():
    pc = RTCPeerConnection()
    pc.addTrack(AudioStreamTrack())
    pc.createDataChannel("oai-events")
    await pc.setLocalDescription(await pc.createOffer())
    write("aiortc-offer.sdp", pc.localDescription.sdp)
    await pc.close()


asyncio.run(answer())
asyncio.run(offer())
