"""Writing media uuids into a chat body: splice vs re-serialise, ``mmgate bench media-uuids``.

The gateway writes each media part's identity as its ``uuid`` (``mmgate.request.media_uuids``)
by splicing ``,"uuid":"..."`` into the original bytes, kept as pieces of them that the proxy
writes with one vectored write; ``splice, joined`` adds the copy into one ``bytes`` object that a
reader needing a contiguous body (the disaggregated legs' JSON decode) pays. The alternative is
what a proxy usually does: decode the JSON into objects, set the field, encode it again (orjson,
the fastest Python JSON library here). All are timed on the same parsed bodies of about 2 MB
and 20 MB (inline images, a page of text), alternating the methods in every round so load hits
them alike; the figure is the median per method. ``parse`` (the gateway's one parse of the body, which either
method follows) is timed beside them for scale. Peak extra memory per method comes from
tracemalloc, in a separate pass. Writes the raw samples as JSON.
"""

from __future__ import annotations

import argparse
import base64
import os
import platform
import random
import struct
import time
import tracemalloc
import zlib
from collections.abc import Callable
from typing import Any

import orjson

from mmgate.request import parse_request
from mmgate.request.limits import Limits
from mmgate.request.media_uuids import uuids_to_write, with_media_uuids
from mmgate.request.pieces import joined
from mmgate.request.view import Api, RequestView
from mmgate_bench.results import write_json
from mmgate_bench.stats import median

SIZES_MB = (2, 20)
IMAGES_PER_BODY = 3


def padded_png(width: int, height: int, total: int, seed: int) -> bytes:
    """A PNG header (what the gateway probes) followed by ``total`` bytes of noise: a file of a
    real image's size whose base64 text does not compress or repeat."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    return head + random.Random(seed).randbytes(max(0, total - len(head)))


def make_body(megabytes: int, seed: int = 0) -> bytes:
    """A chat body of about ``megabytes`` MB: a system text and a user turn with three images."""
    raw_each = megabytes * 1_000_000 * 3 // 4 // IMAGES_PER_BODY  # base64 grows 4/3
    content: list[dict[str, Any]] = [{"type": "text", "text": "Compare these pictures. " * 20}]
    for i in range(IMAGES_PER_BODY):
        image = padded_png(1920, 1080, raw_each, seed * 10 + i)
        url = "data:image/png;base64," + base64.b64encode(image).decode()
        content.append({"type": "image_url", "image_url": {"url": url}})
    system = "You are a careful visual assistant. " * 100
    messages = [{"role": "system", "content": system}, {"role": "user", "content": content}]
    return orjson.dumps({"model": "qwen3-vl", "messages": messages, "max_tokens": 64, "stream": True})


def reserialise(view: RequestView) -> bytes:
    """The usual way: decode the body into objects, set each part's uuid, encode it again."""
    doc = orjson.loads(joined(view.body))
    for (i, j), identity in uuids_to_write(view).items():
        doc["messages"][i]["content"][j]["uuid"] = identity
    return orjson.dumps(doc)


def _parse(view: RequestView) -> object:
    return parse_request(joined(view.body), {}, api=Api.CHAT, limits=Limits(own_media_uuids=True))


METHODS: dict[str, Callable[[RequestView], object]] = {
    "splice": with_media_uuids,
    "splice, joined": lambda view: joined(with_media_uuids(view)),
    "re-serialise (orjson)": reserialise,
    "parse (for scale)": _parse,
}


def peak_bytes(fn: Callable[[RequestView], object], view: RequestView) -> int:
    """Peak memory allocated while ``fn`` runs once (its result included)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = fn(view)
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        tracemalloc.stop()
    return peak


def run_benchmark(sizes_mb: tuple[int, ...], rounds: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for megabytes in sizes_mb:
        body = make_body(megabytes)
        view = parse_request(body, {}, api=Api.CHAT, limits=Limits(own_media_uuids=True))
        spliced, redone = with_media_uuids(view), reserialise(view)
        assert orjson.loads(joined(spliced)) == orjson.loads(redone), "the two methods disagree"
        samples: dict[str, list[float]] = {name: [] for name in METHODS}
        names = list(METHODS)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order
                t0 = time.perf_counter_ns()
                METHODS[name](view)
                samples[name].append((time.perf_counter_ns() - t0) / 1e6)
        medians = {name: median(values) for name, values in samples.items()}
        rows.append(
            {
                "body_bytes": len(body),
                "uuids_written": len(uuids_to_write(view)),
                "median_ms": medians,
                "reserialise_over_splice": medians["re-serialise (orjson)"] / medians["splice"],
                "peak_bytes": {name: peak_bytes(fn, view) for name, fn in METHODS.items()},
                "samples_ms": samples,
            }
        )
    return {
        "load_average_1m": os.getloadavg()[0],
        "machine": f"{platform.machine()} python {platform.python_version()}, 2 shared cores (noisy)",
        "rounds": rounds,
        "results": rows,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=list(SIZES_MB), metavar="MB", help="body sizes in MB"
    )
    parser.add_argument("--rounds", type=int, default=31, help="timed runs of each method per body")
    parser.add_argument("--out", default="results/media-uuids.json")


def run(args: argparse.Namespace) -> int:
    if args.rounds < 1 or any(s < 1 for s in args.sizes):
        print("mmgate bench media-uuids: --rounds and --sizes must be at least 1")
        return 2
    report = run_benchmark(tuple(args.sizes), args.rounds)
    out = write_json(args.out, report)
    print(f"{'body':>10}  " + "".join(f"{name:>24}" for name in METHODS) + f"{'ratio':>8}")
    for row in report["results"]:
        cells = "".join(f"{row['median_ms'][name]:>21.2f} ms" for name in METHODS)
        print(f"{row['body_bytes'] / 1e6:>7.1f} MB  {cells}{row['reserialise_over_splice']:>7.1f}x")
    print(f"medians of {args.rounds} alternating rounds; load average {report['load_average_1m']:.1f}")
    print(f"wrote {out}")
    return 0
