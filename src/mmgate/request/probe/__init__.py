"""Header-only media probing: format by content, then dimensions, duration, frame/sample rate, pages.

``probe(reader)`` never raises: a payload it cannot read (unknown format, truncated, corrupt) gives
``None``, which the caller records as an unprobed asset. Pixels and samples are never decoded.
"""

from __future__ import annotations

from collections.abc import Callable

from mmgate.request.probe import audio, document, ebml, image, isobmff
from mmgate.request.probe.reader import Base64Reader, BytesReader, Reader, ReaderFile, Truncated
from mmgate.request.probe.result import ProbeResult
from mmgate.request.probe.sniff import (
    AUDIO_FORMATS,
    DOCUMENT_FORMATS,
    HEAD_BYTES,
    IMAGE_FORMATS,
    VIDEO_FORMATS,
    sniff,
)

__all__ = [
    "AUDIO_FORMATS",
    "DOCUMENT_FORMATS",
    "IMAGE_FORMATS",
    "PROBERS",
    "VIDEO_FORMATS",
    "Base64Reader",
    "BytesReader",
    "ProbeResult",
    "Reader",
    "ReaderFile",
    "Truncated",
    "probe",
    "probe_bytes",
    "sniff",
]

PROBERS: dict[str, Callable[[Reader], ProbeResult]] = {
    "png": image.png,
    "jpeg": image.jpeg,
    "gif": image.gif,
    "webp": image.webp,
    "bmp": image.bmp,
    "tiff": image.tiff,
    "avif": lambda r: isobmff.heif(r, "avif"),
    "heic": lambda r: isobmff.heif(r, "heic"),
    "mp4": lambda r: isobmff.mp4(r, "mp4"),
    "mov": lambda r: isobmff.mp4(r, "mov"),
    "webm": ebml.webm,
    "wav": audio.wav,
    "flac": audio.flac,
    "mp3": audio.mp3,
    "ogg": audio.ogg,
    "pdf": document.pdf,
}


def probe(reader: Reader) -> tuple[str | None, ProbeResult | None]:
    """(format sniffed from the first bytes, metadata or ``None`` when unreadable)."""
    try:
        fmt = sniff(reader.read(0, HEAD_BYTES))
    except Truncated:
        return None, None
    if fmt is None:
        return None, None
    try:
        return fmt, PROBERS[fmt](reader)
    except Truncated:
        return fmt, None


def probe_bytes(data: bytes) -> ProbeResult | None:
    """Probe media already in memory (files, tests)."""
    return probe(BytesReader(data))[1]
