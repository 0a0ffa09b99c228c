"""Benchmark: parse + probe + identity per request body, and header probers against libraries.

Run ``mmgate bench parse --out docs/benchmarks/parse.json``. It prints medians
(the machine is shared and noisy) and writes every sample summary as JSON. Bodies are built here
with Pillow: a text-only chat, one 1280x720 JPEG inline, three different 1280x720 JPEGs inline.
"""

from __future__ import annotations

import argparse
import base64
import gc
import io
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

import imagesize
import msgspec
import orjson
import xxhash
from PIL import Image

from mmgate.request.bodies import CHAT
from mmgate.request.decode import decode_chat
from mmgate.request.parse import parse_request
from mmgate.request.payload import check_base64
from mmgate.request.probe import Base64Reader, BytesReader, ReaderFile, probe
from mmgate_bench.results import write_json
from mmgate_bench.stats import percentiles


def _photo(seed: int, quality: int = 95) -> bytes:
    """A 1280x720 JPEG with camera-like entropy (noise over a gradient), ~600 KB."""
    base = Image.linear_gradient("L").resize((1280, 720)).convert("RGB")
    noise = Image.effect_noise((1280, 720), 40 + seed).convert("RGB")
    img = Image.blend(base, noise, 0.5)
    out = io.BytesIO()
    img.save(out, "JPEG", quality=quality)
    return out.getvalue()


def bodies() -> dict[str, bytes]:
    text = orjson.dumps(
        {
            "model": "Qwen/Qwen3-VL-8B-Instruct",
            "max_tokens": 256,
            "messages": [
                {"role": "system", "content": "You are a helpful assistant. Answer briefly and precisely."},
                {"role": "user", "content": "What are the three largest cities in Japan by population?"},
            ],
        }
    )
    photos = [_photo(i) for i in range(3)]

    def with_images(n: int) -> bytes:
        parts: list[dict[str, Any]] = [{"type": "text", "text": "Describe the differences between these."}]
        for p in photos[:n]:
            uri = "data:image/jpeg;base64," + base64.b64encode(p).decode()
            parts.append({"type": "image_url", "image_url": {"url": uri}})
        return orjson.dumps(
            {"model": "Qwen/Qwen3-VL-8B-Instruct", "messages": [{"role": "user", "content": parts}]}
        )

    return {"text-only": text, "one-jpeg-720p": with_images(1), "three-jpeg-720p": with_images(3)}


def median_us(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    """Median, p10 and p90 of ``repeat`` timed calls, in microseconds (gc paused while timing)."""
    for _ in range(min(20, repeat)):
        fn()
    samples = []
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - t0) / 1000)
    finally:
        gc.enable()
    p10, p50, p90 = (q or 0.0 for q in percentiles(samples, (10, 50, 90)))
    return {
        "median_us": round(p50, 2),
        "p10_us": round(p10, 2),
        "p90_us": round(p90, 2),
        "n": repeat,
    }


def bench_bodies(repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, body in bodies().items():
        n = repeat if len(body) < 10_000 else max(20, repeat // 20)
        row: dict[str, Any] = {"body_bytes": len(body)}
        row["parse_request"] = median_us(lambda b=body: parse_request(b, {}), n)  # type: ignore[misc]
        row["skeleton_decode_only"] = median_us(lambda b=body: decode_chat(b), n)  # type: ignore[misc]
        row["msgspec_decode_without_cut"] = median_us(lambda b=body: CHAT.decode(b), n)  # type: ignore[misc]
        row["orjson_full_loads"] = median_us(lambda b=body: orjson.loads(b), n)  # type: ignore[misc]
        view = parse_request(body, {})
        payloads = [body[body.index(b"base64,", i) + 7 :] for i in _starts(body)]
        views = [memoryview(p)[: p.index(b'"')] for p in payloads]
        if views:
            row.update(_stages(views, n))
        row["decoded_bytes_for_probing"] = view.extra.get("decoded_bytes", 0)
        out[name] = row
    return out


def _stages(views: list[memoryview], n: int) -> dict[str, Any]:
    """The per-payload stages of parse_request, timed alone over every payload of a body."""
    return {
        "base64_check_all": median_us(lambda: [check_base64(v, "x") for v in views], n),
        "xxh3_128_all": median_us(lambda: [xxhash.xxh3_128_hexdigest(v) for v in views], n),
        "probe_all": median_us(lambda: [probe(Base64Reader(v)) for v in views], n),
        "payload_bytes": sum(len(v) for v in views),
    }


def _starts(body: bytes) -> list[int]:
    found, pos = [], 0
    while (pos := body.find(b"data:image/", pos)) >= 0:
        found.append(pos)
        pos += 1
    return found


def _images() -> dict[str, bytes]:
    def save(fmt: str, **kw: Any) -> bytes:
        img = Image.linear_gradient("L").resize((1280, 720)).convert("RGB")
        out = io.BytesIO()
        img.save(out, fmt, **kw)
        return out.getvalue()

    exif = Image.Exif()
    exif[0x010E] = "x" * 60_000
    return {
        "png": save("PNG"),
        "jpeg": _photo(0),
        "jpeg-progressive-60k-exif-200k-icc": save(
            "JPEG", progressive=True, exif=exif.tobytes(), icc_profile=b"\0" * 200_000
        ),
        "gif": save("GIF"),
        "webp": save("WEBP"),
        "avif": save("AVIF"),
    }


def bench_probers(repeat: int) -> dict[str, Any]:
    """Hand-written readers vs imagesize vs Pillow's lazy open, on bytes and on base64 text."""
    out: dict[str, Any] = {}
    for name, data in _images().items():
        text = base64.b64encode(data)
        row: dict[str, Any] = {"file_bytes": len(data)}
        row["mmgate_bytes"] = median_us(lambda d=data: probe(BytesReader(d)), repeat)  # type: ignore[misc]
        row["imagesize_bytes"] = median_us(lambda d=data: imagesize.get(io.BytesIO(d)), repeat)  # type: ignore[misc]
        row["pillow_open_bytes"] = median_us(lambda d=data: Image.open(io.BytesIO(d)).size, repeat)  # type: ignore[misc]
        row["mmgate_base64"] = median_us(lambda t=text: probe(Base64Reader(t)), repeat)  # type: ignore[misc]
        row["imagesize_base64"] = median_us(
            lambda t=text: imagesize.get(ReaderFile(Base64Reader(t))),  # type: ignore[misc]
            repeat,
        )
        row["pillow_open_base64"] = median_us(
            lambda t=text: Image.open(cast(IO[bytes], ReaderFile(Base64Reader(t)))).size,  # type: ignore[misc]
            repeat,
        )
        for label, fn in (
            ("mmgate", lambda r: probe(r)),
            ("imagesize", lambda r: imagesize.get(ReaderFile(r))),
            ("pillow", lambda r: Image.open(cast(IO[bytes], ReaderFile(r))).size),
        ):
            reader = Base64Reader(text)
            fn(reader)
            row[f"{label}_decoded_bytes"] = reader.decoded
        row["results"] = {
            "mmgate": list(_size(probe(BytesReader(data))[1])),
            "imagesize": list(imagesize.get(io.BytesIO(data))),
            "pillow": list(Image.open(io.BytesIO(data)).size),
        }
        out[name] = row
    return out


def _size(result: Any) -> tuple[int, int]:
    return (result.width, result.height) if result is not None else (-1, -1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument("--repeat", type=int, default=2000, help="timed calls per small case (default 2000)")
    parser.add_argument("--out", type=Path, help="write the raw results as JSON here")


def run(args: argparse.Namespace) -> int:
    results = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "note": "shared 2-core machine, noisy: medians of repeated calls",
            "msgspec": msgspec.__version__,
            "pillow": Image.__version__,  # type: ignore[attr-defined]
            "imagesize": imagesize.__version__,
        },
        "bodies": bench_bodies(args.repeat),
        "probers": bench_probers(max(50, args.repeat // 10)),
    }
    for name, row in results["bodies"].items():
        print(
            f"{name:18s} {row['body_bytes']:>9d} B  parse_request median"
            f" {row['parse_request']['median_us']:>9.1f} µs"
            f"  (skeleton decode {row['skeleton_decode_only']['median_us']:.1f} µs,"
            f" without the data-URI cut {row['msgspec_decode_without_cut']['median_us']:.1f} µs,"
            f" orjson.loads {row['orjson_full_loads']['median_us']:.1f} µs)"
        )
    for name, row in results["probers"].items():
        print(
            f"{name:36s} mmgate {row['mmgate_base64']['median_us']:7.1f} µs"
            f"  imagesize {row['imagesize_base64']['median_us']:7.1f} µs"
            f"  pillow {row['pillow_open_base64']['median_us']:7.1f} µs  (base64 input; decoded"
            f" {row['mmgate_decoded_bytes']}/{row['imagesize_decoded_bytes']}"
            f"/{row['pillow_decoded_bytes']} B)"
        )
    if args.out:
        write_json(args.out, results)
        print(f"wrote {args.out}")
    return 0
