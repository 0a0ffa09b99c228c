"""WebM / Matroska: duration from Segment Info, size (and frame rate) from the first video track.

EBML is a tree of (variable-length id, variable-length size, payload) elements. We descend only
into Segment, Info, Tracks, TrackEntry and Video, and stop at the first Cluster (media data).
"""

from __future__ import annotations

import struct

from mmgate.request.probe.reader import Reader, Truncated, need
from mmgate.request.probe.result import ProbeResult

_EBML, _DOCTYPE = 0x1A45DFA3, 0x4282
_SEGMENT, _CLUSTER = 0x18538067, 0x1F43B675
_INFO, _TIMESCALE, _DURATION = 0x1549A966, 0x2AD7B1, 0x4489
_TRACKS, _TRACK_ENTRY, _TRACK_TYPE, _DEFAULT_DURATION = 0x1654AE6B, 0xAE, 0x83, 0x23E383
_VIDEO, _PIXEL_WIDTH, _PIXEL_HEIGHT = 0xE0, 0xB0, 0xBA
_MAX_ELEMENTS = 4096
_UNKNOWN = -1


def _vint(r: Reader, pos: int, keep_marker: bool) -> tuple[int, int]:
    """(value, length) of the variable-length integer at ``pos``; ``_UNKNOWN`` for all-ones sizes."""
    first = need(r, pos, 1)[0]
    if first == 0:
        raise Truncated("invalid EBML variable-length integer")
    length = 9 - first.bit_length()
    raw = int.from_bytes(need(r, pos, length), "big")
    if keep_marker:
        return raw, length
    value = raw & ((1 << (7 * length)) - 1)
    return (_UNKNOWN if value == (1 << (7 * length)) - 1 else value), length


def _elements(r: Reader, start: int, end: int, budget: list[int]) -> list[tuple[int, int, int]]:
    """(id, payload start, payload end) of the children in ``[start, end)``, up to a Cluster."""
    out = []
    pos = start
    while pos < end:
        budget[0] -= 1
        if budget[0] < 0:
            raise Truncated("too many EBML elements")
        ident, n = _vint(r, pos, keep_marker=True)
        size, m = _vint(r, pos + n, keep_marker=False)
        payload = pos + n + m
        if ident == _CLUSTER:
            break
        stop = end if size == _UNKNOWN else payload + size
        if stop > end:
            stop = end  # a cut-off element: read what is there
        out.append((ident, payload, stop))
        pos = stop
    return out


def _uint(r: Reader, start: int, end: int) -> int:
    if end - start > 8:
        raise Truncated("EBML unsigned integer longer than 8 bytes")
    return int.from_bytes(need(r, start, end - start), "big")


def _float(r: Reader, start: int, end: int) -> float:
    if end - start == 4:
        return float(struct.unpack(">f", need(r, start, 4))[0])
    if end - start == 8:
        return float(struct.unpack(">d", need(r, start, 8))[0])
    raise Truncated("EBML float of odd size")


def webm(r: Reader) -> ProbeResult:
    budget = [_MAX_ELEMENTS]
    top = _elements(r, 0, r.size, budget)
    if not top or top[0][0] != _EBML:
        raise Truncated("no EBML header")
    doc = next((need(r, s, e - s) for i, s, e in _elements(r, *top[0][1:], budget) if i == _DOCTYPE), b"")
    fmt = "webm" if doc.rstrip(b"\x00") == b"webm" else "mkv"
    segment = next(((s, e) for i, s, e in top if i == _SEGMENT), None)
    if segment is None:
        raise Truncated("no Segment")
    scale, duration = 1_000_000, None
    width = height = frame_ns = None
    for ident, start, end in _elements(r, *segment, budget):
        if ident == _INFO:
            for i2, s2, e2 in _elements(r, start, end, budget):
                if i2 == _TIMESCALE:
                    scale = _uint(r, s2, e2) or scale
                elif i2 == _DURATION:
                    duration = _float(r, s2, e2)
        elif ident == _TRACKS and width is None:
            for i2, s2, e2 in _elements(r, start, end, budget):
                if i2 == _TRACK_ENTRY:
                    found = _video_track(r, s2, e2, budget)
                    if found is not None:
                        width, height, frame_ns = found
                        break
    seconds = duration * scale / 1e9 if duration and duration > 0 else None
    fps = round(1e9 / frame_ns, 3) if frame_ns else None
    if width is None and seconds is None:
        raise Truncated("WebM without Info duration or a video track")
    return ProbeResult(fmt, width, height, seconds, fps)


def _video_track(r: Reader, start: int, end: int, budget: list[int]) -> tuple[int, int, int | None] | None:
    kind = frame_ns = None
    width = height = 0
    for ident, s, e in _elements(r, start, end, budget):
        if ident == _TRACK_TYPE:
            kind = _uint(r, s, e)
        elif ident == _DEFAULT_DURATION:
            frame_ns = _uint(r, s, e)
        elif ident == _VIDEO:
            for i2, s2, e2 in _elements(r, s, e, budget):
                if i2 == _PIXEL_WIDTH:
                    width = _uint(r, s2, e2)
                elif i2 == _PIXEL_HEIGHT:
                    height = _uint(r, s2, e2)
    if kind != 1:
        return None
    return width, height, frame_ns
