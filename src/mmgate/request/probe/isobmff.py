"""ISO base media files (MP4, MOV, AVIF, HEIC): walk boxes by their sizes, read only the few we need.

Random access is what makes this cheap on inline media: a ``moov`` box after a 40 MB ``mdat`` is
reached by one size field, without decoding the media data in between.
"""

from __future__ import annotations

from collections.abc import Iterator

from mmgate.request.probe.reader import BytesReader, Reader, Truncated, need
from mmgate.request.probe.result import ProbeResult

_MAX_BOXES = 2048  # per container; real files have a few dozen
_MAX_TRACKS = 64
_MAX_META = 1 << 20  # HEIF item metadata; real files have a few KB


def boxes(r: Reader, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(type, payload start, box end) for each box in ``[start, end)``."""
    pos = start
    for _ in range(_MAX_BOXES):
        if pos + 8 > end:
            return
        head = need(r, pos, 8)
        size, kind, header = int.from_bytes(head[:4], "big"), head[4:8], 8
        if size == 1:
            size, header = int.from_bytes(need(r, pos + 8, 8), "big"), 16
        elif size == 0:  # extends to the end of the enclosing container
            size = end - pos
        if size < header or pos + size > end:
            raise Truncated(f"box {kind!r} at {pos} overruns its container")
        yield kind, pos + header, pos + size
        pos += size
    raise Truncated("too many boxes")


def child(r: Reader, start: int, end: int, kind: bytes) -> tuple[int, int] | None:
    """(payload start, end) of the first ``kind`` box in ``[start, end)``."""
    for k, payload, box_end in boxes(r, start, end):
        if k == kind:
            return payload, box_end
    return None


def _u(b: bytes) -> int:
    return int.from_bytes(b, "big")


# --- HEIF / AVIF -------------------------------------------------------------------------------


def heif(r: Reader, fmt: str) -> ProbeResult:
    """Size of the primary item: its ``ispe`` property, swapped by a quarter-turn ``irot``."""
    found = child(r, 0, r.size, b"meta")
    if found is None:
        raise Truncated("HEIF without meta box")
    if found[1] - found[0] > _MAX_META:
        raise Truncated("implausibly large HEIF meta box")
    # The meta box is small and holds everything we read: decode it once, then walk it in memory.
    r = BytesReader(need(r, found[0], found[1] - found[0]))
    start, end = 4, r.size  # meta is a FullBox
    primary: int | None = None
    props: list[tuple[bytes, int, int]] = []
    assoc: dict[int, list[int]] = {}
    for kind, payload, box_end in boxes(r, start, end):
        if kind == b"pitm":
            head = need(r, payload, 8)
            primary = _u(head[4:6]) if head[0] == 0 else _u(head[4:8])
        elif kind == b"iprp":
            for k2, p2, e2 in boxes(r, payload, box_end):
                if k2 == b"ipco":
                    props = list(boxes(r, p2, e2))
                elif k2 == b"ipma":
                    assoc = _ipma(need(r, p2, e2 - p2))
    wanted = assoc.get(primary, []) if primary is not None else []
    chosen = [props[i - 1] for i in wanted if 0 < i <= len(props)] or props
    size: tuple[int, int] | None = None
    quarter = False
    for kind, payload, _ in chosen:
        if kind == b"ispe" and size is None:
            body = need(r, payload, 12)
            size = (_u(body[4:8]), _u(body[8:12]))
        elif kind == b"irot" and wanted:
            quarter = need(r, payload, 1)[0] & 1 == 1
    if size is None:
        raise Truncated("HEIF without ispe property")
    width, height = (size[1], size[0]) if quarter else size
    return ProbeResult(fmt, width, height)


def _ipma(data: bytes) -> dict[int, list[int]]:
    """item id -> 1-based property indices, from an ``ipma`` FullBox payload."""
    version, flags = data[0], _u(data[1:4])
    count, pos = _u(data[4:8]), 8
    out: dict[int, list[int]] = {}
    for _ in range(min(count, 4096)):
        id_len = 2 if version < 1 else 4
        if pos + id_len + 1 > len(data):
            raise Truncated("short ipma")
        item = _u(data[pos : pos + id_len])
        n = data[pos + id_len]
        pos += id_len + 1
        width = 2 if flags & 1 else 1
        if pos + n * width > len(data):
            raise Truncated("short ipma")
        mask = 0x7FFF if width == 2 else 0x7F
        out[item] = [_u(data[pos + i * width : pos + (i + 1) * width]) & mask for i in range(n)]
        pos += n * width
    return out


# --- MP4 / MOV ---------------------------------------------------------------------------------


def _full_times(r: Reader, payload: int) -> tuple[int, int]:
    """(timescale, duration) from an ``mvhd`` or ``mdhd`` FullBox."""
    version = need(r, payload, 1)[0]
    if version == 1:
        body = need(r, payload + 4, 28)
        return _u(body[16:20]), _u(body[20:28])
    body = need(r, payload + 4, 16)
    return _u(body[8:12]), _u(body[12:16])


def _track(r: Reader, start: int, end: int) -> dict[str, object]:
    out: dict[str, object] = {}
    for kind, payload, box_end in boxes(r, start, end):
        if kind == b"tkhd":
            version = need(r, payload, 1)[0]
            at = payload + 4 + (84 if version == 1 else 72)
            dims = need(r, at, 8)
            out["tkhd"] = (_u(dims[:4]) >> 16, _u(dims[4:]) >> 16)
        elif kind == b"mdia":
            for k2, p2, e2 in boxes(r, payload, box_end):
                if k2 == b"hdlr":
                    out["handler"] = need(r, p2 + 8, 4)
                elif k2 == b"mdhd":
                    out["mdhd"] = _full_times(r, p2)
                elif k2 == b"minf":
                    stbl = child(r, p2, e2, b"stbl")
                    if stbl is not None:
                        _sample_table(r, *stbl, out)
    return out


def _sample_table(r: Reader, start: int, end: int, out: dict[str, object]) -> None:
    for kind, payload, _ in boxes(r, start, end):
        if kind in (b"stsz", b"stz2"):
            out["samples"] = _u(need(r, payload + 8, 4))
        elif kind == b"stsd":
            entry = need(r, payload + 8, 36)  # first sample entry, header included
            out["entry"] = entry


def mp4(r: Reader, fmt: str) -> ProbeResult:
    """Duration (movie header), size and frame rate of the first video track, or audio facts."""
    moov = child(r, 0, r.size, b"moov")
    if moov is None:
        raise Truncated("no moov box")
    timescale = duration = 0
    tracks: list[dict[str, object]] = []
    for kind, payload, box_end in boxes(r, *moov):
        if kind == b"mvhd":
            timescale, duration = _full_times(r, payload)
        elif kind == b"mvex" and duration == 0:
            mehd = child(r, payload, box_end, b"mehd")
            if mehd is not None:
                version = need(r, mehd[0], 1)[0]
                duration = _u(need(r, mehd[0] + 4, 8 if version == 1 else 4))
        elif kind == b"trak" and len(tracks) < _MAX_TRACKS:
            tracks.append(_track(r, payload, box_end))
    seconds = duration / timescale if timescale and duration else None
    video = next((t for t in tracks if t.get("handler") == b"vide"), None)
    if video is not None:
        return _video_result(fmt, video, seconds)
    audio = next((t for t in tracks if t.get("handler") == b"soun"), None)
    if audio is not None:
        return _audio_result(fmt, audio, seconds)
    if seconds is None:
        raise Truncated("mp4 without duration or tracks")
    return ProbeResult(fmt, duration_s=seconds)


def _track_seconds(track: dict[str, object]) -> float | None:
    mdhd = track.get("mdhd")
    if isinstance(mdhd, tuple) and mdhd[0] and mdhd[1]:
        return float(mdhd[1] / mdhd[0])
    return None


def _video_result(fmt: str, track: dict[str, object], seconds: float | None) -> ProbeResult:
    width = height = 0
    tkhd = track.get("tkhd")
    if isinstance(tkhd, tuple):
        width, height = tkhd
    entry = track.get("entry")
    if (not width or not height) and isinstance(entry, bytes):
        width, height = _u(entry[32:34]), _u(entry[34:36])
    track_seconds = _track_seconds(track)
    samples = track.get("samples")
    fps = None
    if isinstance(samples, int) and samples and track_seconds:
        fps = round(samples / track_seconds, 3)
    return ProbeResult(fmt, width or None, height or None, seconds or track_seconds, fps)


def _audio_result(fmt: str, track: dict[str, object], seconds: float | None) -> ProbeResult:
    entry = track.get("entry")
    channels = rate = None
    if isinstance(entry, bytes):
        channels = _u(entry[24:26]) or None
        rate = (_u(entry[32:36]) >> 16) or None
    return ProbeResult(fmt, duration_s=seconds or _track_seconds(track), sample_rate=rate, channels=channels)
