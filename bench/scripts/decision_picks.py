"""Replay seeded random scheduling decisions and print what they chose, to compare two checkouts.

A speed change to the scheduler must not change a decision. This script makes the same sequence of
random requests, fleet states and lifecycle events from ``--seed`` for each shipped config (E/P/D
on 4 + 4 + 8 pods, E/PD, P/D, predicted-ttft on 8 and 64 endpoints with online learning, aggregated,
encoder-affinity), schedules each request and writes one JSON line per decision: every profile's
targets, the routing headers, each endpoint's matched prefix blocks and, for predicted-ttft, each
endpoint's predicted seconds (``repr`` of the float, so a reordered sum shows), its model terms,
work and future cost. Run it once per tree and compare the digests (or ``diff`` the ``--out``
files)::

    PYTHONPATH=../before/src python bench/scripts/decision_picks.py --out before.jsonl
    PYTHONPATH=src python bench/scripts/decision_picks.py --out after.jsonl

Only public scheduler API is used (``build_scheduler``, ``Scheduler.schedule`` and its lifecycle
calls, the ``keys`` data), so an older tree runs it as is. The configs are read from this
checkout's ``examples/`` unless ``--examples`` names another folder, so both trees decide under the
same configs.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import random
import sys
from pathlib import Path
from typing import Any

from mmgate.config import load_config
from mmgate.request import parse_request
from mmgate.scheduling import EndpointState, Metrics, SchedulingRequest, build_scheduler
from mmgate.scheduling.keys import PREDICTED_TTFT, PREFIX_MATCH
from mmgate.scheduling.types import NoEndpointsError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CASES: tuple[tuple[str, str, tuple[int, int, int] | int], ...] = (
    ("e-p-d", "e-p-d.yaml", (4, 4, 8)),
    ("e-pd", "e-pd.yaml", (3, 0, 5)),
    ("p-d", "p-d.yaml", (0, 3, 5)),
    ("predicted-ttft@8", "predicted-ttft.yaml", 8),
    ("predicted-ttft@64", "predicted-ttft.yaml", 64),
    ("aggregated", "aggregated.yaml", 8),
    ("encoder-affinity", "encoder-affinity.yaml", 8),
)
MODEL = "Qwen/Qwen3-VL-32B-Instruct"


def _png(rng: random.Random) -> str:
    from PIL import Image

    size = (rng.choice((64, 320, 640, 1280, 1920)), rng.choice((48, 240, 480, 720, 1080)))
    color = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def bodies(rng: random.Random, n: int) -> list[bytes]:
    """``n`` chat bodies: 12 groups sharing a system prompt and a pool of images, each request
    taking 0-4 of its group's images and a question (repeated or new)."""
    groups = []
    for g in range(12):
        system = f"You are assistant {g}. " * rng.randrange(1, 40)
        groups.append((system, [_png(rng) for _ in range(rng.randrange(1, 6))]))
    questions = [f"Question {q}: what is shown here? " * rng.randrange(1, 80) for q in range(30)]
    out = []
    for r in range(n):
        system, images = groups[rng.randrange(len(groups))]
        k = rng.randrange(min(4, len(images)) + 1)
        chosen = images[:k] if rng.random() < 0.7 else rng.sample(images, k)
        content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in chosen]
        text = rng.choice(questions) + (f" [{r}]" if rng.random() < 0.5 else "")
        content.append({"type": "text", "text": text})
        body: dict[str, Any] = {
            "model": MODEL,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": content}],
            "stream": rng.random() < 0.9,
            "max_tokens": rng.choice((16, 300, 2000)),
        }
        out.append(json.dumps(body).encode())
    return out


def fleet(shape: tuple[int, int, int] | int) -> list[EndpointState]:
    if isinstance(shape, int):
        roles: list[str | None] = [None] * shape
    else:
        e, p, d = shape
        roles = [*["encode"] * e, *["prefill"] * p, *["decode"] * d]
    return [
        EndpointState(f"10.0.0.{i}:8000", role=role, metrics=Metrics(block_size=16, num_gpu_blocks=60000))
        for i, role in enumerate(roles)
    ]


def _model(predicted: Any) -> list[Any]:
    """What else the predicted-TTFT producer left per endpoint (terms as floats, the request's
    own work and the future cost, each ``repr``), for the fields a tree has."""
    out: list[Any] = [sorted((k, [repr(float(v)) for v in t]) for k, t in predicted.terms.items())]
    for field in ("work", "future"):
        values = getattr(predicted, field, None)
        out.append(None if values is None else sorted((k, repr(v)) for k, v in values.items()))
    return out


def replay(config: Path, shape: tuple[int, int, int] | int, seed: int, decisions: int) -> list[str]:
    rng = random.Random(seed)
    cfg = load_config(config)
    scheduler = build_scheduler(cfg.picker, mmgate=cfg.mmgate, seed=seed)
    eps = fleet(shape)
    views = [parse_request(b, {}) for b in bodies(rng, 200)]
    lines: list[str] = []
    now = 100.0
    open_: list[tuple[str, float]] = []  # (request id, started)
    first: list[tuple[str, float]] = []
    for r in range(decisions):
        now += rng.random() * 0.02
        for ep in eps:  # a scrape now and then; one pod sometimes goes stale
            if rng.random() < 0.2:
                stale = rng.random() < 0.05
                ep.metrics = Metrics(
                    waiting=rng.randrange(6),
                    running=rng.randrange(8),
                    kv_usage=rng.random(),
                    block_size=16,
                    num_gpu_blocks=60000,
                    scraped_at=now - (30.0 if stale else 0.0),
                )
        req = SchedulingRequest(views[rng.randrange(len(views))], f"r{r}")
        try:
            result = scheduler.schedule(req, eps, now)
        except NoEndpointsError as exc:
            lines.append(json.dumps([r, "none", str(exc)]))
            continue
        scheduler.pre_request_before_send(req, result, now)
        scheduler.start(req, result, now)
        scheduler.pre_request_deferred(req, result, now)
        open_.append((req.request_id, now))
        prefix = req.get(PREFIX_MATCH)
        predicted = req.get(PREDICTED_TTFT)
        targets = {
            name: None if prof is None else [t.name for t in prof.targets]
            for name, prof in sorted(result.profiles.items())
        }
        lines.append(
            json.dumps(
                [
                    r,
                    targets,
                    sorted((req.upstream_headers or {}).items()),
                    None if prefix is None else sorted(prefix.matched.items()),
                    None if prefix is None else prefix.total_blocks,
                    None if predicted is None else sorted((k, repr(v)) for k, v in predicted.seconds.items()),
                    None if predicted is None else _model(predicted),
                ]
            )
        )
        while open_ and (len(open_) > 48 or rng.random() < 0.3):  # first tokens, observed TTFTs
            rid, started = open_.pop(rng.randrange(len(open_)))
            scheduler.on_first_token(rid, max(now, started + rng.random() * 0.5))
            first.append((rid, now))
        while first and (len(first) > 32 or rng.random() < 0.3):
            rid, _ = first.pop(0)
            scheduler.on_finished(rid, now)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--decisions", type=int, default=2000, help="per case (default 2000)")
    parser.add_argument("--examples", type=Path, default=EXAMPLES, help="folder of the configs")
    parser.add_argument("--out", type=Path, help="write every decision as a JSON line here")
    args = parser.parse_args(argv)
    every: list[str] = []
    for label, name, shape in CASES:
        lines = replay(args.examples / name, shape, args.seed, args.decisions)
        digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
        print(f"{label:20s} {len(lines):6d} decisions  {digest}")
        every += [f"{label} {line}" for line in lines]
    digest = hashlib.sha256("\n".join(every).encode()).hexdigest()[:16]
    print(f"{'all':20s} {len(every):6d} decisions  {digest}")
    if args.out is not None:
        args.out.write_text("\n".join(every) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
