"""Pricing cost per asset, for the ≤ 20 µs budget: ``mmgate bench pricing``.

Requests are built as :class:`RequestView` objects directly (parsing is measured elsewhere) with a
mix of probed image sizes, a video and an audio clip, then priced under several rules. Each figure
is the median over repeats of (time to price the request / assets in it); ``price+sequence`` also
builds the pseudo-token stream. Writes the raw numbers as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import random
import time
from typing import Any

from mmgate.request.view import Api, MediaAsset, Modality, RequestView, Source
from mmgate.tokens.estimator import EstimateConfig
from mmgate.tokens.pricing import PricingConfig, price
from mmgate.tokens.sequence import build_sequence
from mmgate_bench.results import write_json
from mmgate_bench.stats import median

CONFIGS: dict[str, PricingConfig] = {
    "qwen3-vl": PricingConfig(family="qwen3-vl"),
    "qwen2.5-vl": PricingConfig(family="qwen2.5-vl"),
    "gemma4": PricingConfig(family="gemma4"),
    "idefics3": PricingConfig(family="idefics3"),
    "llava-next": PricingConfig(family="llava-next"),
    "internvl": PricingConfig(family="internvl"),
    "llama4": PricingConfig(family="llama4"),
    "phi-4-multimodal": PricingConfig(family="phi-4-multimodal"),
    "llm-d estimate": PricingConfig(family=None, estimate=EstimateConfig()),
    "anthropic": PricingConfig(family=None, provider="anthropic"),
    "openai:gpt-4.1-mini": PricingConfig(family=None, provider="openai:gpt-4.1-mini"),
}


def make_view(n_images: int, seed: int, spread: int) -> RequestView:
    """A chat prompt with ``n_images`` probed images, one video and one audio clip.

    Image sizes are common camera/screen sizes plus a random offset below ``spread`` pixels: a
    small spread repeats sizes (what traffic looks like), a large one makes nearly every size new.
    """
    rng = random.Random(seed)
    parts: list[str | MediaAsset] = ["system: You are a careful visual assistant.\n"]
    for i in range(n_images):
        w, h = rng.choice(BASE_SIZES)
        w, h = w + rng.randrange(spread), h + rng.randrange(spread)
        parts.append(f"user: picture {i}\n")
        ident = f"{seed:08x}{i:04x}"
        parts.append(
            MediaAsset(Modality.IMAGE, Source.INLINE, ident, f"m[{i}]", width=w, height=h, probed=True)
        )
    parts.append(
        MediaAsset(
            Modality.VIDEO, Source.URL, "v" * 32, "m[v]", width=1280, height=720, duration_s=12.0, fps=30.0
        )
    )
    parts.append(MediaAsset(Modality.AUDIO, Source.INLINE, "a" * 32, "m[a]", duration_s=20.0))
    parts.append("user: what changed between the pictures?\n")
    return RequestView(Api.CHAT, "m", parts)


BASE_SIZES = [(640, 480), (1280, 720), (1920, 1080), (3024, 4032), (800, 800), (4096, 2160)]


def images_only(view: RequestView) -> RequestView:
    parts = [p for p in view.parts if isinstance(p, str) or p.modality is Modality.IMAGE]
    return RequestView(view.api, view.model, parts)


def per_asset_us(fn: Any, cfg: PricingConfig, views: list[RequestView], repeats: int) -> float:
    """Median over repeats of the time per asset to run ``fn(view, config)`` on every view once.

    Each repeat gets a fresh copy of the config (made outside the timed part), so its size cache
    starts empty and only repeats *within* the views can hit it.
    """
    assets = sum(len(v.assets) for v in views)
    samples = []
    for _ in range(repeats):
        fresh = dataclasses.replace(cfg)
        t0 = time.perf_counter_ns()
        for v in views:
            fn(v, fresh)
        samples.append((time.perf_counter_ns() - t0) / assets / 1000)
    return median(samples)


def _price(view: RequestView, cfg: PricingConfig) -> object:
    return price(view, cfg)


def _price_and_sequence(view: RequestView, cfg: PricingConfig) -> object:
    return build_sequence(view, price(view, cfg))


def calibration_us() -> float:
    """Median time of a fixed pure-Python loop (sum of 1,000 ints): how busy the machine was."""
    samples = []
    for _ in range(21):
        t0 = time.perf_counter_ns()
        sum(range(1000))
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return median(samples)


def run_benchmark(n_images: int, repeats: int, inner: int) -> dict[str, Any]:
    scenarios = {
        # one request priced again and again: its sizes are cached after the first time
        "repeated sizes": [make_view(n_images, seed=7, spread=1)] * inner,
        # every request has new random sizes (a 4,000-px spread): the size cache rarely helps
        "new sizes": [make_view(n_images, seed=1000 + i, spread=4000) for i in range(inner)],
    }
    results = []
    for name, cfg in CONFIGS.items():
        row: dict[str, Any] = {"rule": name}
        for scenario, views in scenarios.items():
            if cfg.provider is not None:  # hosted APIs price images only here
                views = [images_only(v) for v in views]
            for v in views[:2]:
                price(v, cfg)  # warm imports and per-config tables
            row[f"{scenario}: price"] = per_asset_us(_price, cfg, views, repeats)
            row[f"{scenario}: price+sequence"] = per_asset_us(_price_and_sequence, cfg, views, repeats)
            row["assets_per_request"] = len(views[0].assets)
        results.append(row)
    return {
        "load_average_1m": os.getloadavg()[0],
        "calibration_us": calibration_us(),
        "machine": f"{platform.machine()} python {platform.python_version()}, 2 shared cores (noisy)",
        "n_images": n_images,
        "repeats": repeats,
        "requests_per_repeat": inner,
        "budget_us_per_asset": 20.0,
        "results": results,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--images", type=int, default=8, help="images per request (plus one video, one audio)"
    )
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--inner", type=int, default=200, help="requests per repeat")
    parser.add_argument("--out", default="results/pricing.json")


def run(args: argparse.Namespace) -> int:
    report = run_benchmark(args.images, args.repeats, args.inner)
    out = write_json(args.out, report)
    cols = [
        "repeated sizes: price",
        "repeated sizes: price+sequence",
        "new sizes: price",
        "new sizes: price+sequence",
    ]
    print("µs per asset (median)      repeated sizes          new sizes")
    print(f"{'rule':<22}{'price':>10}{'+sequence':>11}{'price':>10}{'+sequence':>11}")
    for r in report["results"]:
        cells = "".join(f"{r[c]:>{10 if i % 2 == 0 else 11}.2f}" for i, c in enumerate(cols))
        print(f"{r['rule']:<22}{cells}")
    print(f"load average {report['load_average_1m']:.1f}; calibration loop {report['calibration_us']:.1f} µs")
    worst = max(r["new sizes: price"] for r in report["results"])
    print(f"worst rule with new sizes: {worst:.2f} µs per asset to price (budget 20 µs); wrote {out}")
    return 0
