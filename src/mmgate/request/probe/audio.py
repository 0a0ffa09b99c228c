"""Audio duration, sample rate and channels: WAV and FLAC by hand, MP3 and Ogg through mutagen.

WAV (``fmt ``/``data`` chunks) and FLAC (STREAMINFO, always the first metadata block) state
everything in fixed fields, so a few bytes suffice. MP3 needs a frame-sync search and Xing/VBRI/
LAME parsing, Ogg the granule position of the last page: that is where mutagen earns its place.
mutagen reads through :class:`ReaderFile`, so on base64 input only the bytes it touches decode.
"""

from __future__ import annotations

from typing import Any

import mutagen.mp3
import mutagen.oggopus
import mutagen.oggvorbis

from mmgate.request.probe.reader import Reader, ReaderFile, Truncated, need
from mmgate.request.probe.result import ProbeResult

_MAX_CHUNKS = 256


def wav(r: Reader) -> ProbeResult:
    pos = 12
    fmt: bytes | None = None
    for _ in range(_MAX_CHUNKS):
        head = need(r, pos, 8)
        kind, size = head[:4], int.from_bytes(head[4:8], "little")
        if kind == b"fmt ":
            fmt = need(r, pos + 8, 16)
        elif kind == b"data":
            if fmt is None:
                raise Truncated("WAV data before fmt")
            available = max(0, r.size - pos - 8)
            if size == 0xFFFFFFFF or size > available:  # streamed or cut: what is there
                size = available
            channels = int.from_bytes(fmt[2:4], "little")
            rate = int.from_bytes(fmt[4:8], "little")
            byte_rate = int.from_bytes(fmt[8:12], "little")
            if not byte_rate or not rate:
                raise Truncated("WAV with zero rate")
            return ProbeResult("wav", duration_s=size / byte_rate, sample_rate=rate, channels=channels)
        pos += 8 + size + (size & 1)
    raise Truncated("WAV without data chunk")


def flac(r: Reader) -> ProbeResult:
    block = need(r, 4, 4 + 34)
    if block[0] & 0x7F != 0:
        raise Truncated("FLAC without STREAMINFO first")
    bits = int.from_bytes(block[4 + 10 : 4 + 18], "big")
    rate = bits >> 44
    channels = ((bits >> 41) & 0x7) + 1
    total = bits & ((1 << 36) - 1)
    if not rate:
        raise Truncated("FLAC with zero sample rate")
    seconds = total / rate if total else None
    return ProbeResult("flac", duration_s=seconds, sample_rate=rate, channels=channels)


def mp3(r: Reader) -> ProbeResult:
    try:
        info = mutagen.mp3.MPEGInfo(ReaderFile(r))
    except Exception as exc:  # mutagen raises assorted errors on corrupt input; all mean "unprobed"
        raise Truncated(f"mp3: {exc}") from exc
    return ProbeResult(
        "mp3", duration_s=info.length or None, sample_rate=info.sample_rate, channels=info.channels
    )


def ogg(r: Reader) -> ProbeResult:
    first_packet = need(r, 0, 36)[28:36]
    kind: type[mutagen.oggopus.OggOpus] | type[mutagen.oggvorbis.OggVorbis]
    if first_packet.startswith(b"OpusHead"):
        kind, fmt = mutagen.oggopus.OggOpus, "opus"
    elif first_packet.startswith(b"\x01vorbis"):
        kind, fmt = mutagen.oggvorbis.OggVorbis, "vorbis"
    else:
        raise Truncated("Ogg stream that is neither Opus nor Vorbis")
    try:
        info: Any = kind(ReaderFile(r)).info  # mutagen types it loosely
    except Exception as exc:  # see mp3()
        raise Truncated(f"{fmt}: {exc}") from exc
    rate = 48000 if fmt == "opus" else int(info.sample_rate)
    return ProbeResult(fmt, duration_s=info.length or None, sample_rate=rate, channels=int(info.channels))
