"""What the reference engine's caches save on a document conversation, ``mmgate bench engine-caches``.

One conversation about a page image (the ``multi-turn-document`` workload: every turn resends the
page, the earlier questions and answers, and a new question) runs on the reference engine in-process,
under four cache settings, each with a fresh engine:

- ``stateless``: no cache; every turn preprocesses and encodes the page and prefills everything;
- ``encoder``: the encoder cache (image features by the gateway's media identity);
- ``encoder+prefix``: and the prefix KV cache (block-aligned, blocks keyed with the image identity);
- ``all``: and the processor cache (preprocessed pixels by identity), vLLM's default set.

Per turn it records the time to the first token (which holds the processor, encoder and prefill
work), in wall time and in the CPU time of the thread running the model (torch runs on that one
thread, so CPU time is the work itself and hardly moves with the machine's load), and the engine's
own stage timers (:class:`~mmgate.refengine.runtime.StageSeconds`, wall time): processor, encoder,
prefill, and decode per token. Every turn decodes the same number of tokens
(``ignore_eos``), and the greedy replies of every setting are compared token for token. The settings
alternate within each round (their order rotates) so machine load hits them alike; figures are
medians over rounds. Writes the raw samples as JSON.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import dataclass
from typing import Any

from mmgate_bench.results import markdown_table, write_json
from mmgate_bench.stats import median

SETTINGS: dict[str, dict[str, Any]] = {
    "stateless": {"enable_prefix_caching": False, "encoder_cache_tokens": 0, "processor_cache_bytes": 0},
    "encoder": {"enable_prefix_caching": False, "processor_cache_bytes": 0},
    "encoder+prefix": {"processor_cache_bytes": 0},
    "all": {},
}
"""EngineConfig fields per setting (the rest are the engine's defaults: every cache on)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of one setting in one round (seconds; stage times are this turn's share)."""

    ttft: float
    ttft_cpu: float
    total: float
    processor: float
    encoder: float
    prefill: float
    decode: float
    decode_tokens: int
    prompt_tokens: int
    cached_tokens: int
    token_ids: tuple[int, ...]

    def doc(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__slots__ if k != "token_ids"}
        out["reply"] = list(self.token_ids)
        return out


def conversation(turns: int, output_tokens: int, width: int, height: int) -> list[list[dict[str, Any]]]:
    """The messages of each turn of one seeded document conversation (the page inline as base64)."""
    from mmgate_bench.workloads.media import MediaCache
    from mmgate_bench.workloads.synthetic import multi_turn_document

    work = multi_turn_document(
        conversations=1, turns=turns, width=width, height=height, output_tokens=output_tokens
    )
    media = MediaCache()
    return [item.body(media, stream=False)["messages"] for item in work.items]


def run_conversation(engine: Any, turns: list[list[dict[str, Any]]], output_tokens: int) -> list[Turn]:
    """Every turn on ``engine`` in order, timed."""
    from mmgate.refengine.prompt import prompt_from_messages
    from mmgate.refengine.runtime import GenerateRequest

    out: list[Turn] = []
    for t, messages in enumerate(turns):
        before = engine.stages
        request = GenerateRequest(
            f"turn-{t}", prompt_from_messages(messages), max_tokens=output_tokens, ignore_eos=True
        )
        start, start_cpu = time.perf_counter(), time.thread_time()
        engine.add_request(request)
        first: float | None = None
        first_cpu = 0.0
        tokens: list[int] = []
        last = None
        while engine.has_unfinished():
            for step in engine.step():
                if first is None:
                    first, first_cpu = time.perf_counter(), time.thread_time()
                tokens.append(step.token_id)
                last = step
        end = time.perf_counter()
        after = engine.stages
        assert first is not None and last is not None
        out.append(
            Turn(
                ttft=first - start,
                ttft_cpu=first_cpu - start_cpu,
                total=end - start,
                processor=after.processor - before.processor,
                encoder=after.encoder - before.encoder,
                prefill=after.prefill - before.prefill,
                decode=after.decode - before.decode,
                decode_tokens=after.decode_tokens - before.decode_tokens,
                prompt_tokens=last.prompt_tokens,
                cached_tokens=last.cached_tokens,
                token_ids=tuple(tokens),
            )
        )
    return out


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from mmgate.refengine.model import load_model, tiny_model
    from mmgate.refengine.runtime import Engine, EngineConfig

    torch.set_num_threads(args.threads)
    model = load_model(args.model) if args.model else tiny_model(args.tiny)
    turns = conversation(args.turns, args.output_tokens, args.width, args.height)
    names = list(SETTINGS)
    samples: dict[str, list[list[Turn]]] = {name: [] for name in names}
    # one untimed pass: torch's first calls allocate and pick kernels
    run_conversation(Engine(model, EngineConfig()), turns[:2], args.output_tokens)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            engine = Engine(model, EngineConfig(**SETTINGS[name]))
            samples[name].append(run_conversation(engine, turns, args.output_tokens))
    replies = {name: [t.token_ids for t in samples[name][0]] for name in names}
    return {
        "benchmark": "engine-caches",
        "model": model.name,
        "turns": args.turns,
        "output_tokens": args.output_tokens,
        "page": [args.width, args.height],
        "rounds": args.rounds,
        "threads": args.threads,
        "settings": SETTINGS,
        "replies_identical": all(replies[n] == replies[names[0]] for n in names),
        "summary": summarise(samples),
        "samples": {name: [[t.doc() for t in conv] for conv in convs] for name, convs in samples.items()},
        "load_average_1m": os.getloadavg()[0],
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def summarise(samples: dict[str, list[list[Turn]]]) -> dict[str, dict[str, Any]]:
    """Medians over rounds, per setting: the first turn, and the follow-ups (turns 2..n) as the
    median of each round's mean."""
    out: dict[str, dict[str, Any]] = {}
    for name, convs in samples.items():

        def med(pick: Any, turns: slice, convs: list[list[Turn]] = convs) -> float:
            return median(sum(pick(t) for t in conv[turns]) / len(conv[turns]) for conv in convs)

        later = slice(1, None)
        out[name] = {
            "first_turn_ttft_ms": 1000 * med(lambda t: t.ttft, slice(0, 1)),
            "followup_ttft_ms": 1000 * med(lambda t: t.ttft, later),
            "followup_ttft_cpu_ms": 1000 * med(lambda t: t.ttft_cpu, later),
            "followup_processor_ms": 1000 * med(lambda t: t.processor, later),
            "followup_encoder_ms": 1000 * med(lambda t: t.encoder, later),
            "followup_prefill_ms": 1000 * med(lambda t: t.prefill, later),
            "decode_ms_per_token": 1000 * med(lambda t: t.decode / max(t.decode_tokens, 1), slice(None)),
            "followup_cached_fraction": med(lambda t: t.cached_tokens / t.prompt_tokens, later),
            "ttft_ms_by_turn": [1000 * med(lambda t: t.ttft, slice(i, i + 1)) for i in range(len(convs[0]))],
            "ttft_cpu_ms_by_turn": [
                1000 * med(lambda t: t.ttft_cpu, slice(i, i + 1)) for i in range(len(convs[0]))
            ],
            "prompt_tokens_by_turn": [t.prompt_tokens for t in convs[0]],
            "cached_tokens_by_turn": [t.cached_tokens for t in convs[0]],
        }
    return out


def table(report: dict[str, Any]) -> list[str]:
    rows = []
    base = report["summary"]["stateless"]
    for name, s in report["summary"].items():
        rows.append(
            [
                name,
                f"{s['first_turn_ttft_ms']:.1f}",
                f"{s['followup_ttft_ms']:.1f}",
                f"{base['followup_ttft_ms'] / s['followup_ttft_ms']:.2f}x",
                f"{s['followup_ttft_cpu_ms']:.1f}",
                f"{base['followup_ttft_cpu_ms'] / s['followup_ttft_cpu_ms']:.2f}x",
                f"{s['followup_processor_ms']:.1f}",
                f"{s['followup_encoder_ms']:.1f}",
                f"{s['followup_prefill_ms']:.1f}",
                f"{s['decode_ms_per_token']:.2f}",
                f"{100 * s['followup_cached_fraction']:.0f}%",
            ]
        )
    header = [
        "caches",
        "turn 1 TTFT ms",
        "turns 2+ TTFT ms",
        "speed-up",
        "turns 2+ TTFT CPU ms",
        "CPU speed-up",
        "processor ms",
        "encoder ms",
        "prefill ms",
        "decode ms/token",
        "prompt cached",
    ]
    return markdown_table(header, rows)


def turn_table(report: dict[str, Any], key: str = "ttft_ms_by_turn", title: str = "TTFT ms") -> list[str]:
    """Time to first token per turn (``key``: wall or CPU), and how much of each prompt the prefix
    cache held."""
    summary = report["summary"]
    turns = len(summary["stateless"][key])
    rows = [[name, *(f"{ms:.0f}" for ms in s[key])] for name, s in summary.items()]
    held = summary["all"]
    pairs = zip(held["prompt_tokens_by_turn"], held["cached_tokens_by_turn"], strict=True)
    rows.append(["prompt tokens (cached)", *(f"{p} ({c})" for p, c in pairs)])
    return markdown_table([title, *(f"turn {i + 1}" for i in range(turns))], rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description, parser.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--tiny", default="qwen2-vl", metavar="ARCH", help="tiny random model (default qwen2-vl)"
    )
    which.add_argument("--model", metavar="DIR", help="a local model directory instead (never downloaded)")
    parser.add_argument("--turns", type=int, default=6, help="turns of the conversation (default 6)")
    parser.add_argument("--output-tokens", type=int, default=16, help="tokens decoded per turn (default 16)")
    parser.add_argument("--width", type=int, default=1344, help="page image width (default 1344)")
    parser.add_argument("--height", type=int, default=896, help="page image height (default 896)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every setting (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a shared machine)")
    parser.add_argument("--out", default="results/engine-caches.json")


def run(args: argparse.Namespace) -> int:
    for flag in ("turns", "output_tokens", "width", "height", "rounds", "threads"):
        if getattr(args, flag) < 1 or (flag == "turns" and args.turns < 2):
            low = 2 if flag == "turns" else 1
            print(f"mmgate bench engine-caches: --{flag.replace('_', '-')} must be at least {low}")
            return 2
    try:
        report = run_benchmark(args)
    except ValueError as exc:  # an unknown --tiny architecture, a model directory it cannot run
        print(f"mmgate bench engine-caches: {exc}")
        return 2
    out = write_json(args.out, report)
    print("\n".join(table(report)))
    print()
    print("\n".join(turn_table(report)))
    print()
    print("\n".join(turn_table(report, "ttft_cpu_ms_by_turn", "TTFT CPU ms")))
    same = "identical" if report["replies_identical"] else "DIFFERENT"
    print(
        f"{report['model']}, {args.turns} turns, {args.output_tokens} tokens each; medians of {args.rounds} "
        f"rounds; greedy replies {same} across settings; load average {report['load_average_1m']:.1f}"
    )
    print(f"wrote {out}")
    return 0
