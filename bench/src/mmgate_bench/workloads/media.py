"""Synthetic media with real headers: JPEG/PNG images, MP4 videos, WAV audio.

Benchmarks need media whose bytes look like what clients send: a real container header the
gateway's probes read, a payload that does not compress to nothing (so body sizes and upload
times are honest) and bytes unique per distinct asset (so content hashes tell assets apart and
an engine's processor cache is not hit by accident). Encoding is the slow part of a workload, so
each asset is made lazily, on first use, from a seed derived from its key, and the base64 text is
kept in a bounded cache.
"""

from __future__ import annotations

import base64
import io
import math
import struct
import wave
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw

from mmgate.request.view import Modality


@dataclass(frozen=True, slots=True)
class MediaSpec:
    """One distinct media asset of a workload, described by size rather than bytes.

    ``key`` names the asset within its workload: two parts with the same key are the same asset
    (same bytes, same content hash). The discrete-event mode never needs the bytes, only this.
    """

    modality: Modality
    key: str
    width: int = 0
    height: int = 0
    duration_s: float = 0.0
    fps: float = 0.0
    sample_rate: int = 0
    fmt: str = ""  # "jpeg", "png", "mp4", "wav"

    @property
    def mime(self) -> str:
        return {
            "jpeg": "image/jpeg",
            "png": "image/png",
            "mp4": "video/mp4",
            "wav": "audio/wav",
        }[self.fmt]


def image(key: str, width: int, height: int, fmt: str = "jpeg") -> MediaSpec:
    return MediaSpec(Modality.IMAGE, key, width=width, height=height, fmt=fmt)


def video(key: str, width: int, height: int, duration_s: float, fps: float = 24.0) -> MediaSpec:
    return MediaSpec(
        Modality.VIDEO, key, width=width, height=height, duration_s=duration_s, fps=fps, fmt="mp4"
    )


def audio(key: str, duration_s: float, sample_rate: int = 16_000) -> MediaSpec:
    return MediaSpec(Modality.AUDIO, key, duration_s=duration_s, sample_rate=sample_rate, fmt="wav")


BYTES_PER_PIXEL = {"jpeg": 0.22, "png": 1.70}
"""File bytes per pixel of :func:`render_image`'s pictures (JPEG quality 85, PNG level 1), the
median over 336x224 to 1920x1080 (``mmgate bench media-load`` records each size's)."""
_VIDEO_FRAME_BYTES = 2_048  # seeded noise per frame in render_video's sample data


def encoded_size(spec: MediaSpec) -> int:
    """About how many bytes :func:`render` makes for ``spec``, without rendering it: images from
    the measured bytes per pixel, WAV exactly, MP4 from its fixed-size sample data. The
    discrete-event mode sizes inline payloads with it (their base64 decode and hash cost)."""
    if spec.modality is Modality.IMAGE:
        return round(spec.width * spec.height * BYTES_PER_PIXEL.get(spec.fmt, BYTES_PER_PIXEL["png"]))
    if spec.modality is Modality.AUDIO:
        return 44 + 2 * int(spec.duration_s * spec.sample_rate)
    if spec.modality is Modality.VIDEO:
        return 1_024 + _VIDEO_FRAME_BYTES * max(1, round(spec.duration_s * spec.fps))
    return 0


def _seed(key: str) -> int:
    return zlib.crc32(key.encode()) * 2_654_435_761 % (1 << 63)


@lru_cache(maxsize=8)
def _grain(width: int, height: int) -> np.ndarray:
    """A sensor-noise tile per size, shifted per image: cheap, and keeps JPEGs photo-sized."""
    rng = np.random.default_rng(width * 100_003 + height)
    return rng.integers(-10, 11, size=(height, width, 1), dtype=np.int16)


def render_image(spec: MediaSpec) -> bytes:
    """A product-photo-like picture: smooth colour field, a few solid shapes, sensor grain."""
    rng = np.random.default_rng(_seed(spec.key))
    w, h = spec.width, spec.height
    field = rng.integers(0, 256, size=(9, 16, 3), dtype=np.uint8)
    picture = Image.fromarray(field).resize((w, h), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(picture)
    for _ in range(6):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1 = x0 + int(rng.integers(max(1, w // 10), max(2, w // 3)))
        y1 = y0 + int(rng.integers(max(1, h // 10), max(2, h // 3)))
        colour = (int(rng.integers(256)), int(rng.integers(256)), int(rng.integers(256)))
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape((x0, y0, x1, y1), fill=colour)
    grain = np.roll(_grain(w, h), (int(rng.integers(h)), int(rng.integers(w))), axis=(0, 1))
    pixels = np.clip(np.asarray(picture, dtype=np.int16) + grain, 0, 255).astype(np.uint8)
    out = io.BytesIO()
    if spec.fmt == "png":
        Image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    else:
        Image.fromarray(pixels).save(out, format="JPEG", quality=85)
    return out.getvalue()


def render_audio(spec: MediaSpec) -> bytes:
    """16-bit mono WAV: a few seeded tones plus noise, so it is neither silent nor trivially small."""
    rng = np.random.default_rng(_seed(spec.key))
    n = int(spec.duration_s * spec.sample_rate)
    t = np.arange(n, dtype=np.float64) / spec.sample_rate
    signal = np.zeros(n)
    for _ in range(3):
        signal += np.sin(2 * math.pi * float(rng.uniform(120, 2_000)) * t) * float(rng.uniform(0.1, 0.3))
    signal += rng.normal(0.0, 0.05, n)
    samples = (np.clip(signal, -1.0, 1.0) * 32_000).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(spec.sample_rate)
        w.writeframes(samples.tobytes())
    return out.getvalue()


def _box(kind: bytes, *payload: bytes) -> bytes:
    body = b"".join(payload)
    return struct.pack(">I", 8 + len(body)) + kind + body


def _full_box(kind: bytes, version: int, flags: int, *payload: bytes) -> bytes:
    return _box(kind, struct.pack(">I", (version << 24) | flags), *payload)


def render_video(spec: MediaSpec) -> bytes:
    """An ISO-BMFF (MP4) file whose boxes state size, duration and frame rate; the sample data
    is seeded noise (no decoder runs on the gateway path, and the simulator never decodes)."""
    timescale = 1_000
    duration = round(spec.duration_s * timescale)
    frames = max(1, round(spec.duration_s * spec.fps))
    delta = max(1, round(timescale / spec.fps))
    matrix = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
    mvhd = _full_box(
        b"mvhd", 0, 0, struct.pack(">IIIIIH", 0, 0, timescale, duration, 0x10000, 0x100), b"\0" * 10,
        matrix, b"\0" * 24, struct.pack(">I", 2),
    )  # fmt: skip
    tkhd = _full_box(
        b"tkhd", 0, 3, struct.pack(">IIIII", 0, 0, 1, 0, duration), b"\0" * 8,
        struct.pack(">hhHH", 0, 0, 0, 0), matrix, struct.pack(">II", spec.width << 16, spec.height << 16),
    )  # fmt: skip
    mdhd = _full_box(b"mdhd", 0, 0, struct.pack(">IIIIHH", 0, 0, timescale, duration, 0x55C4, 0))
    hdlr = _full_box(b"hdlr", 0, 0, struct.pack(">I", 0), b"vide", b"\0" * 12, b"video\0")
    avc1 = _box(
        b"avc1", b"\0" * 6, struct.pack(">H", 1), b"\0" * 16, struct.pack(">HH", spec.width, spec.height),
        struct.pack(">III", 0x480000, 0x480000, 0), struct.pack(">H", 1), b"\0" * 32,
        struct.pack(">Hh", 0x18, -1),
    )  # fmt: skip
    stsd = _full_box(b"stsd", 0, 0, struct.pack(">I", 1), avc1)
    stts = _full_box(b"stts", 0, 0, struct.pack(">III", 1, frames, delta))
    frame_bytes = _VIDEO_FRAME_BYTES
    stsz = _full_box(b"stsz", 0, 0, struct.pack(">II", frame_bytes, frames))
    stsc = _full_box(b"stsc", 0, 0, struct.pack(">IIII", 1, 1, frames, 1))
    ftyp = _box(b"ftyp", b"isom", struct.pack(">I", 0x200), b"isomiso2avc1mp41")
    rng = np.random.default_rng(_seed(spec.key))
    data = rng.integers(0, 256, size=frames * frame_bytes, dtype=np.uint8).tobytes()

    # Chunk offset points past ftyp + moov to mdat's payload; moov's size doesn't depend on it.
    def moov(offset: int) -> bytes:
        stco = _full_box(b"stco", 0, 0, struct.pack(">II", 1, offset))
        stbl = _box(b"stbl", stsd, stts, stsc, stsz, stco)
        vmhd = _full_box(b"vmhd", 0, 1, b"\0" * 8)
        dinf = _box(b"dinf", _full_box(b"dref", 0, 0, struct.pack(">I", 1), _full_box(b"url ", 0, 1)))
        minf = _box(b"minf", vmhd, dinf, stbl)
        return _box(b"moov", mvhd, _box(b"trak", tkhd, _box(b"mdia", mdhd, hdlr, minf)))

    head = len(ftyp) + len(moov(0)) + 8
    return ftyp + moov(head) + _box(b"mdat", data)


def render(spec: MediaSpec) -> bytes:
    if spec.modality is Modality.IMAGE:
        return render_image(spec)
    if spec.modality is Modality.AUDIO:
        return render_audio(spec)
    if spec.modality is Modality.VIDEO:
        return render_video(spec)
    raise ValueError(f"cannot render {spec.modality} media")


class MediaCache:
    """Base64 payloads by key, made on first use; bounded so long workloads stay in memory."""

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, str] = OrderedDict()
        self.rendered = 0

    def b64(self, spec: MediaSpec) -> str:
        hit = self._items.get(spec.key)
        if hit is not None:
            self._items.move_to_end(spec.key)
            return hit
        text = base64.b64encode(render(spec)).decode("ascii")
        self.rendered += 1
        self._items[spec.key] = text
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)
        return text

    def data_uri(self, spec: MediaSpec) -> str:
        return f"data:{spec.mime};base64,{self.b64(spec)}"


class MediaReferences(MediaCache):
    """Media named by key instead of rendered: the bodies the discrete-event mode hands to the
    orchestration carry each asset as a short reference (its identity comes from the item's
    sizes and key, never from bytes), so nothing is ever rendered or base64-encoded."""

    def b64(self, spec: MediaSpec) -> str:
        return spec.key

    def data_uri(self, spec: MediaSpec) -> str:
        return f"mmgate-des:{spec.key}"
