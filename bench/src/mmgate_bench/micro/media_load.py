"""The API server's cost of loading inline media, measured on real files: ``mmgate bench media-load``.

For each image format and size it renders one file with the workloads' own renderer (a
product-photo-like JPEG or PNG, the bytes the HTTP benchmarks send), then times, median over
repeats, the three things vLLM's API server does with an inline image on every request:

- ``base64``: ``pybase64.b64decode(text, validate=True)`` of the data URI's payload (what vLLM's
  ``ImageMediaIO.load_base64`` runs);
- ``hash``: blake3 of the file bytes (vLLM's default ``--mm-hasher-algorithm``, over the original
  encoded bytes of fetched and data-URI media); sha256 is timed beside it for FIPS deployments;
- ``decode``: ``PIL.Image.open(...).convert("RGB")`` (the load forced by the mode conversion).

Each figure is the median CPU time of the calling thread (wall time is kept beside it in the JSON).

Then it fits the simulator's :class:`~mmgate.sim.profiles.MediaLoad` constants: base64 and hash
as lines through (MiB, ms), decode as a line through (megapixels, ms) per format; the intercepts
of the decode lines, averaged, are the per-item cost. It prints the fit as the profile section
and writes every timing as JSON. The numbers are this machine's: a 2-core shared x86 CPU.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import platform
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import PIL
import pybase64
from PIL import Image

from mmgate.sim.profiles import fit_poly
from mmgate_bench.results import write_json
from mmgate_bench.stats import median
from mmgate_bench.workloads.media import image, render_image

SIZES = ((336, 224), (672, 448), (1024, 1024), (1280, 720), (1344, 896), (1600, 1200), (1920, 1080))
FORMATS = ("jpeg", "png")
MIB = float(1 << 20)


def _once_ms(fn: Callable[[], object]) -> tuple[float, float]:
    """(CPU ms, wall ms) of one call. The fit uses CPU time: on a shared machine the wall time
    also counts the moments other processes held the core, which a server's own core would not."""
    c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
    fn()
    return (time.thread_time_ns() - c0) / 1e6, (time.perf_counter_ns() - w0) / 1e6


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _decode(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


def measure(repeats: int, blake3_hash: Callable[[bytes], object]) -> list[dict[str, Any]]:
    """One row per (format, size): file and base64 sizes and the median ms of each stage.

    Rounds interleave the files (every stage of every file once per round), so a burst of load
    from other work on the shared machine spreads over all sizes instead of bending one."""
    files = []
    for fmt in FORMATS:
        for w, h in SIZES:
            raw = render_image(image(f"media-load:{fmt}:{w}x{h}", w, h, fmt))
            text = base64.b64encode(raw)
            stages: dict[str, Callable[[], object]] = {
                "base64_ms": partial(pybase64.b64decode, text, validate=True),
                "blake3_ms": partial(blake3_hash, raw),
                "sha256_ms": partial(_sha256, raw),
                "decode_ms": partial(_decode, raw),
            }
            for fn in stages.values():
                fn()  # warm: first-call imports, allocator
            samples: dict[str, list[tuple[float, float]]] = {k: [] for k in stages}
            files.append((fmt, w, h, raw, text, stages, samples))
    for _ in range(repeats):
        for *_, stages, samples in files:
            for key, fn in stages.items():
                samples[key].append(_once_ms(fn))
    rows = []
    for fmt, w, h, raw, text, _, samples in files:
        row: dict[str, Any] = {
            "format": fmt,
            "width": w,
            "height": h,
            "file_bytes": len(raw),
            "base64_bytes": len(text),
            "bytes_per_pixel": round(len(raw) / (w * h), 4),
        }
        for key, values in samples.items():
            row[key] = round(median(cpu for cpu, _ in values), 4)
            row[key.replace("_ms", "_wall_ms")] = round(median(wall for _, wall in values), 4)
        rows.append(row)
    return rows


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The :class:`~mmgate.sim.profiles.MediaLoad` constants from the measured rows."""
    b64 = fit_poly([(r["base64_bytes"] / MIB, r["base64_ms"]) for r in rows], degree=1)
    hashed = fit_poly([(r["file_bytes"] / MIB, r["blake3_ms"]) for r in rows], degree=1)
    decode: dict[str, float] = {}
    decode_c0 = []
    for fmt in FORMATS:
        c0, c1 = fit_poly(
            [(r["width"] * r["height"] / 1e6, r["decode_ms"]) for r in rows if r["format"] == fmt], degree=1
        )
        decode[fmt] = round(c1, 3)
        decode_c0.append(c0)
    per_item = b64[0] + hashed[0] + sum(decode_c0) / len(decode_c0)
    return {
        "per_item_ms": round(max(0.0, per_item), 3),
        "base64_ms_per_mib": round(b64[1], 4),
        "hash_ms_per_mib": round(hashed[1], 4),
        "decode_ms_per_megapixel": decode,
        "other_decode_ms_per_megapixel": max(decode.values()),
        "bytes_per_pixel": {
            fmt: round(median([r["bytes_per_pixel"] for r in rows if r["format"] == fmt]), 4)
            for fmt in FORMATS
        },
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument("--repeats", type=int, default=25, help="timings per stage and file (median)")
    parser.add_argument("--out", default="results/media-load.json")


def run(args: argparse.Namespace) -> int:
    try:
        import blake3
    except ImportError:
        print(
            "mmgate bench media-load: needs the blake3 package (pip install 'mmgate[bench]')", file=sys.stderr
        )
        return 2
    if args.repeats < 1:
        print("mmgate bench media-load: --repeats must be at least 1", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    rows = measure(args.repeats, lambda b: blake3.blake3(b).hexdigest())
    fitted = fit(rows)
    report = {
        "machine": f"{platform.machine()} python {platform.python_version()}, {os.cpu_count()} shared cores",
        "load_average_1m": [load_before, os.getloadavg()[0]],
        "repeats": args.repeats,
        "pillow": PIL.__version__,
        "pybase64": pybase64.__version__,
        "blake3": getattr(blake3, "__version__", "?"),
        "rows": rows,
        "fit": fitted,
    }
    out = write_json(args.out, report)
    print(f"{'file':<16}{'KiB':>8}{'base64 ms':>11}{'blake3 ms':>11}{'sha256 ms':>11}{'decode ms':>11}")
    for r in rows:
        name = f"{r['format']} {r['width']}x{r['height']}"
        print(
            f"{name:<16}{r['file_bytes'] / 1024:>8.0f}{r['base64_ms']:>11.3f}{r['blake3_ms']:>11.3f}"
            f"{r['sha256_ms']:>11.3f}{r['decode_ms']:>11.2f}"
        )
    rates = ", ".join(f"{k}: {v}" for k, v in fitted["decode_ms_per_megapixel"].items())
    print(
        "media_load:  # measured by mmgate bench media-load\n"
        f"  per_item_ms: {fitted['per_item_ms']}\n"
        f"  base64_ms_per_mib: {fitted['base64_ms_per_mib']}\n"
        f"  hash_ms_per_mib: {fitted['hash_ms_per_mib']}\n"
        f"  decode_ms_per_megapixel: {{{rates}}}\n"
        f"  other_decode_ms_per_megapixel: {fitted['other_decode_ms_per_megapixel']}"
    )
    print(f"load average {load_before:.1f}; wrote {out}")
    return 0
