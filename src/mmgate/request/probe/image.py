"""Image dimensions from headers: PNG, JPEG, GIF, WebP, BMP, TIFF (AVIF/HEIC live in isobmff.py).

Each reader touches a few dozen bytes, except JPEG, which hops from segment to segment until the
frame header (SOF) and so skips EXIF/ICC/XMP payloads without decoding them. docs/request.md says
why these are hand-written rather than imagesize/Pillow (measured: several times faster, and
bounded by construction).
"""

from __future__ import annotations

from typing import Literal

from mmgate.request.probe.reader import Reader, Truncated, need
from mmgate.request.probe.result import ProbeResult

# Start-of-frame markers: baseline, extended, progressive, lossless, (differential, arithmetic).
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_STANDALONE = frozenset({0x01, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8})
_MAX_JPEG_SEGMENTS = 1024
_JPEG_HEAD = 768  # one lazy-reader window
_MAX_TIFF_ENTRIES = 4096


def png(r: Reader) -> ProbeResult:
    head = need(r, 0, 24)
    if head[12:16] != b"IHDR":
        raise Truncated("PNG without IHDR first")
    return ProbeResult("png", int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"))


def gif(r: Reader) -> ProbeResult:
    head = need(r, 0, 10)
    return ProbeResult("gif", int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little"))


def bmp(r: Reader) -> ProbeResult:
    head = need(r, 0, 26)
    if int.from_bytes(head[14:18], "little") == 12:  # OS/2 BITMAPCOREHEADER: 16-bit sizes
        width, height = int.from_bytes(head[18:20], "little"), int.from_bytes(head[20:22], "little")
    else:  # height is negative for top-down bitmaps
        width = int.from_bytes(head[18:22], "little", signed=True)
        height = abs(int.from_bytes(head[22:26], "little", signed=True))
    return ProbeResult("bmp", width, height)


def webp(r: Reader) -> ProbeResult:
    head = need(r, 0, 30)
    chunk = head[12:16]
    if chunk == b"VP8 ":  # lossy: key frame start code, then 14-bit sizes
        if head[23:26] != b"\x9d\x01\x2a":
            raise Truncated("VP8 without key frame")
        width = int.from_bytes(head[26:28], "little") & 0x3FFF
        height = int.from_bytes(head[28:30], "little") & 0x3FFF
    elif chunk == b"VP8L":  # lossless: signature byte, then 14-bit (size - 1) fields
        if head[20] != 0x2F:
            raise Truncated("VP8L without signature")
        bits = int.from_bytes(head[21:25], "little")
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif chunk == b"VP8X":  # extended: 24-bit (canvas size - 1)
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
    else:
        raise Truncated(f"unknown WebP chunk {chunk!r}")
    return ProbeResult("webp", width, height)


def jpeg(r: Reader) -> ProbeResult:
    # The frame header usually sits in the first few hundred bytes, which sniffing has decoded
    # already: walk the segments in that local copy and ask the reader only beyond it.
    head = r.read(0, _JPEG_HEAD)
    size = len(head)
    pos = 2
    for _ in range(_MAX_JPEG_SEGMENTS):
        mark = head[pos : pos + 4] if pos + 4 <= size else need(r, pos, 4)
        if mark[0] != 0xFF:
            raise Truncated(f"no JPEG marker at {pos}")
        code = mark[1]
        if code == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if code in _STANDALONE:
            pos += 2
            continue
        if code in (0xD9, 0xDA):  # end of image / scan data before any frame header
            raise Truncated("JPEG without frame header")
        length = int.from_bytes(mark[2:4], "big")
        if length < 2:
            raise Truncated("JPEG segment length < 2")
        if code in _SOF:
            frame = head[pos + 4 : pos + 9] if pos + 9 <= size else need(r, pos + 4, 5)
            height, width = int.from_bytes(frame[1:3], "big"), int.from_bytes(frame[3:5], "big")
            return ProbeResult("jpeg", width, height)
        pos += 2 + length
    raise Truncated("too many JPEG segments before the frame header")


def tiff(r: Reader) -> ProbeResult:
    head = need(r, 0, 8)
    order: Literal["little", "big"] = "little" if head[:2] == b"II" else "big"

    def num(b: bytes) -> int:
        return int.from_bytes(b, order)

    ifd = num(head[4:8])
    count = num(need(r, ifd, 2))
    if count > _MAX_TIFF_ENTRIES:
        raise Truncated("implausible TIFF directory")
    entries = need(r, ifd + 2, 12 * count)
    found: dict[int, int] = {}
    for i in range(0, 12 * count, 12):
        tag, kind = num(entries[i : i + 2]), num(entries[i + 2 : i + 4])
        if tag in (256, 257):
            found[tag] = num(entries[i + 8 : i + 10]) if kind == 3 else num(entries[i + 8 : i + 12])
    if 256 not in found or 257 not in found:
        raise Truncated("TIFF without ImageWidth/ImageLength")
    return ProbeResult("tiff", found[256], found[257])
