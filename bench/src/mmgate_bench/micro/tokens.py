"""``mmgate bench tokens``: what engine-exact token ids cost per request, next to the pseudo stream.

``token-producer`` is built twice from configs, as ``mmgate serve`` builds it: with the default
pseudo-token stream, and with ``tokens: [{model: "*", mode: engine, tokenizerDir: DIR}]``. Both
tokenize the same parsed chat requests (parsing is measured by ``mmgate bench parse``), the steps
alternating in one run, ``--repeats`` times ``--iterations`` requests; the median per request is
reported. Every request is a different one, so nothing is timed twice:

  new chat    a multi-turn conversation of about ``--text-tokens`` engine tokens never seen before
              (every piece of it encoded: the cold cost)
  next turn   the same history with a new last question (what a conversation sends next; the
              earlier turns' pieces are remembered, :mod:`mmgate.tokens.exact.segments`)
  + image     the next turn with a 448x448 image in it (placeholder expansion)

For the new chat the two parts of engine mode are timed alone too: rendering the chat template
(the conversation vLLM would build, then Jinja) and encoding the rendered text whole with
``tokenizer.json``. Give the served model's folder (``--tokenizer``); without one,
``python examples/tokenizer/make_tokenizer.py --chat-template qwen FOLDER`` builds a small
Qwen-style one (a 4096-token vocabulary: more tokens per byte than a real 150k one, so its text is
shorter for the same token count).
"""

from __future__ import annotations

import argparse
import base64
import gc
import os
import platform
import struct
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from tokenizers import Tokenizer

from mmgate.config import parse_config
from mmgate.request import parse_request
from mmgate.scheduling import SchedulingRequest, build_scheduler
from mmgate.scheduling.plugins.token_producer import TokenProducer
from mmgate.tokens.exact.conversation import conversation
from mmgate.tokens.exact.placeholders import placeholders_for
from mmgate_bench.micro.pricing import calibration_us
from mmgate_bench.results import write_json
from mmgate_bench.stats import median

MODEL = "bench-model"
WORDS = ("the", "image", "shows", "a", "quiet", "street", "with", "parked", "cars", "and", "tall", "trees",
         "under", "pale", "sky", "person", "red", "coat", "walks", "past", "shop", "window", "while", "light",
         "rain", "falls", "on", "pavement", "in", "distance", "tram", "turns", "corner", "clock")  # fmt: skip
CASES = ("new chat", "next turn", "next turn + image")


def png_header(width: int, height: int) -> bytes:
    """The start of a PNG of that size: all the gateway reads of an image."""
    ihdr = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr))


def chat(history: int, words: int, question: str, image: bool) -> bytes:
    """``history`` distinguishes conversations; ``question`` the last turn."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"You answer carefully. Case {history}."}]
    for t in range(8):
        text = " ".join(WORDS[(history + t * 7 + i) % len(WORDS)] for i in range(words))
        messages.append({"role": "user" if t % 2 == 0 else "assistant", "content": f"{history}: {text}"})
    last: Any = question
    if image:
        url = "data:image/png;base64," + base64.b64encode(png_header(448, 448)).decode()
        last = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": question}]
    messages.append({"role": "user", "content": last})
    return orjson.dumps({"model": MODEL, "messages": messages, "max_tokens": 16})


def producer(family: str, folder: str | None) -> TokenProducer:
    params: dict[str, Any] = {"family": family}
    if folder is not None:
        params["tokens"] = [{"model": "*", "mode": "engine", "tokenizerDir": folder}]
    doc = {"plugins": [{"type": "token-producer", "parameters": params}, {"type": "random-picker"}]}
    plugin = build_scheduler(parse_config(doc).picker).plugins["token-producer"]
    assert isinstance(plugin, TokenProducer)
    return plugin


def words_for(engine: TokenProducer, target: int) -> int:
    """Words per turn that make the chat about ``target`` engine tokens long."""
    words = 10
    for _ in range(8):
        n = len(
            engine.tokenize(SchedulingRequest(parse_request(chat(-1, words, "?", False), {}), "r")).token_ids
        )
        if abs(n - target) < target // 50:
            break
        words = max(1, round(words * target / n))
    return words


def bodies(case: str, words: int, count: int, start: int) -> list[bytes]:
    """``count`` distinct requests of a case (``start`` keeps runs apart)."""
    if case == "new chat":
        return [chat(start + i, words, "and this?", False) for i in range(count)]
    return [chat(0, words, f"and question {start + i}?", case.endswith("image")) for i in range(count)]


def timed(fn: Callable[[Any], object], items: Sequence[Any]) -> float:
    """µs per item of ``fn`` over ``items``."""
    gc.disable()
    try:
        start = time.perf_counter()
        for item in items:
            fn(item)
        return (time.perf_counter() - start) / len(items) * 1e6
    finally:
        gc.enable()


def run_benchmark(
    folder: str, family: str, text_tokens: int, iterations: int, repeats: int
) -> dict[str, Any]:
    pseudo, engine = producer(family, None), producer(family, folder)
    tok = engine.modes.for_model(MODEL)
    assert tok is not None
    holders = placeholders_for(family)
    whole = Tokenizer.from_file(tok.files.tokenizer_json)  # no pieces remembered: the cold encode

    def render(data: bytes) -> str:
        c = conversation(data, tok.template.content_format, holders)
        return tok.template.render(c.messages, kwargs=c.kwargs)

    words = words_for(engine, text_tokens)
    engine.tokenize(
        SchedulingRequest(parse_request(bodies("next turn", words, 1, -1)[0], {}), "r")
    )  # history
    runs: dict[str, dict[str, list[float]]] = {c: {} for c in CASES}
    lengths: dict[str, int] = {}
    for r in range(repeats):
        for case in CASES:
            # Distinct requests per repeat and per mode, so the engine never meets a request twice.
            made = bodies(case, words, 2 * iterations, 2 * r * iterations + 1)
            views = [SchedulingRequest(parse_request(b, {}), "r") for b in made]
            steps: dict[str, tuple[Callable[[Any], object], Sequence[Any]]] = {
                "pseudo": (pseudo.tokenize, views[:iterations]),
                "engine": (engine.tokenize, views[iterations:]),
            }
            if case == "new chat":
                texts = [render(b) for b in made[:iterations]]
                steps["engine: render"] = (render, made[:iterations])
                steps["engine: encode whole"] = (lambda t: whole.encode(t, add_special_tokens=False), texts)
            for step, (fn, items) in steps.items():
                runs[case].setdefault(step, []).append(timed(fn, items))
            lengths[case] = len(engine.tokenize(views[0]).token_ids)
    results = []
    for case in CASES:
        med = {k: median(v) for k, v in runs[case].items()}
        results.append(
            {
                "case": case,
                "engine_tokens": lengths[case],
                "median_us": med,
                "engine_minus_pseudo_us": med["engine"] - med["pseudo"],
                "runs_us": runs[case],
            }
        )
    return {
        "benchmark": "tokens",
        "family": family,
        "words_per_turn": words,
        "iterations": iterations,
        "repeats": repeats,
        "python": platform.python_version(),
        "load_average_1m": os.getloadavg()[0],
        "calibration_us": calibration_us(),
        "cases": results,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument("--tokenizer", metavar="DIR", required=True, help="the served model's folder")
    parser.add_argument("--family", default="qwen2.5-vl", help="pricing family (default %(default)s)")
    parser.add_argument("--text-tokens", type=int, default=2000, help="engine tokens per chat (default 2000)")
    parser.add_argument("--iterations", type=int, default=20, help="requests per step and repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="results/tokens.json")


def run(args: argparse.Namespace) -> int:
    try:
        report = run_benchmark(args.tokenizer, args.family, args.text_tokens, args.iterations, args.repeats)
    except ValueError as exc:  # a config error: the folder cannot serve (ModelFilesError is one)
        print(f"mmgate bench tokens: {exc}", file=sys.stderr)
        return 2
    out = write_json(args.out, report)
    print(
        f"{'µs per request (median)':<26}{'tokens':>7}{'pseudo':>9}{'engine':>10}{'render':>9}{'encode':>9}"
    )
    for c in report["cases"]:
        m = c["median_us"]
        parts = "".join(
            f"{m[k]:>9.0f}" if k in m else f"{'':>9}" for k in ("engine: render", "engine: encode whole")
        )
        print(f"{c['case']:<26}{c['engine_tokens']:>7}{m['pseudo']:>9.1f}{m['engine']:>10.0f}{parts}")
    load, calibration = report["load_average_1m"], report["calibration_us"]
    print(f"load average {load:.1f}; calibration loop {calibration:.1f} µs; wrote {out}")
    return 0
