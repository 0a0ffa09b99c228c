"""``mmgate sim``: run simulated vLLM-compatible pods (one port each) in this process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from mmgate.modelserver.flags import add_cache_arguments, add_kv_events_arguments
from mmgate.process import listen_failure, run_forever, stop_signal
from mmgate.sim.faults import FaultSettings
from mmgate.sim.profiles import ProfileError
from mmgate.sim.roles import Role, role_from_kv_transfer_config
from mmgate.sim.spec import PodSpec, expand, load_fleet
from mmgate.tables import Table, add_format_argument, columns, emit
from mmgate.vllm.kv_events_config import parse_kv_events_config

EPILOG = """\
examples:
  mmgate sim --profile qwen3-vl-32b-h200-tp2 --pods 8 --base-port 8100
  mmgate sim --pods 2 --kv-events-config '{"enable_kv_cache_events": true, "endpoint": "tcp://*:5557",
             "replay_endpoint": "tcp://*:5657", "topic": "kv"}'
  mmgate sim --fleet fleet.yaml --time-scale 0.5      # every pod twice as fast as real time
  mmgate sim --mm-encoder-only --base-port 8200       # an encode-only pod for E/PD topologies
  curl -s -XPOST localhost:8100/admin/faults -d '{"rate_503": 0.2, "stall_for": 5}'
"""


DESCRIPTION = """\
Run simulated vLLM pods in this process, one HTTP port each. A pod speaks the OpenAI API
(/v1/chat/completions, /v1/completions, SSE streaming), exposes vLLM's /metrics, can publish KV
events over ZMQ in vLLM's wire format, and times every step with a profile (model x GPU): encoder,
prefill chunks, decode batches, prefix/encoder/processor caches and KV memory. See docs/sim.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mmgate.sim.profiles import available_profiles

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    fleet = parser.add_argument_group("fleet")
    fleet.add_argument(
        "--profile",
        metavar="NAME|FILE",
        default="qwen3-vl-32b-h200-tp2",
        help=f"timing profile: {', '.join(available_profiles())}, or a YAML path (default %(default)s)",
    )
    fleet.add_argument(
        "--pods", metavar="N", type=int, default=1, help="number of identical pods (default 1)"
    )
    fleet.add_argument(
        "--base-port",
        metavar="P",
        type=int,
        default=8100,
        help="port of the first pod, the rest follow; 0 = any free ports (default 8100)",
    )
    fleet.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    fleet.add_argument(
        "--fleet", metavar="FILE.yaml", help="fleet description; flags given override defaults"
    )
    fleet.add_argument("--model", help="served model name (default: the profile's model)")
    fleet.add_argument("--family", help="model family for media token counts (default: the profile's)")
    fleet.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="local model folder (tokenizer.json + chat template): engine-exact token ids, so KV events "
        "carry the block hashes a real vLLM would publish (default: mmgate's pseudo-token stream)",
    )
    fleet.add_argument(
        "--time-scale",
        metavar="X",
        type=float,
        help="wall seconds per simulated second; 0.5 runs twice as fast (default 1)",
    )
    fleet.add_argument("--seed", metavar="N", type=int, help="seed for timing noise and fault draws")
    fleet.add_argument(
        "--natural-output-tokens",
        metavar="N",
        type=int,
        help="answer length when the client sets no limit or ignore_eos is false (default 256)",
    )
    fleet.add_argument(
        "--duration", metavar="S", type=float, help="stop after S seconds (default: run until Ctrl-C)"
    )
    fleet.add_argument(
        "--endpoints-file", metavar="PATH", help="write the pods' endpoints as JSON here once they listen"
    )
    add_format_argument(parser)

    engine = parser.add_argument_group("engine (vLLM flag names)")
    add_cache_arguments(engine, capacity_help="override the profile's KV capacity in blocks")
    engine.add_argument("--max-num-batched-tokens", metavar="N", type=int, help="per-step token budget")
    engine.add_argument(
        "--disable-chunked-mm-input",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="never end a prefill chunk inside an image/video/audio item: the chunk stops before "
        "it and the item is scheduled whole in a later step (default off, as in vLLM)",
    )

    engine.add_argument(
        "--mm-encoder-tp-mode",
        choices=["weights", "data"],
        help="weights (default): the encoder as the profile times it, items one after another; data: "
        "each GPU of the replica encodes its share of a step's items (encoder data parallelism)",
    )
    engine.add_argument(
        "--tensor-parallel-size",
        metavar="N",
        type=int,
        help="GPUs of one replica (default: the profile's); data mode encodes on that many at once",
    )

    lora = parser.add_argument_group("LoRA adapters (vLLM flag names)")
    lora.add_argument(
        "--lora-modules",
        metavar="NAME=PATH",
        nargs="+",
        help="adapters served beside the base model, listed in /v1/models with it as parent; a "
        'request names one in "model" (also vLLM\'s JSON form {"name": ..., "path": ...})',
    )
    lora.add_argument(
        "--max-loras", metavar="N", type=int, help="adapters resident in GPU slots at once (default 1)"
    )
    lora.add_argument(
        "--lora-load-time",
        metavar="S",
        type=float,
        help="simulated seconds to load an adapter that is not resident (default 0.05)",
    )
    lora.add_argument("--enable-lora", action="store_true", help="accepted for vLLM compatibility")

    roles = parser.add_argument_group("disaggregation")
    roles.add_argument(
        "--role",
        choices=[r.value for r in Role],
        help="deployment role (default both). encode runs the media encoder only; prefill, decode and "
        "both only label the pod (table, --endpoints-file): each request's kv_transfer_params decides",
    )
    roles.add_argument("--mm-encoder-only", action="store_true", help="encode only; same as --role encode")
    roles.add_argument(
        "--kv-transfer-config", metavar="JSON", help="vLLM's JSON; only its kv_role is read (it sets --role)"
    )
    roles.add_argument(
        "--kv-transfer-time-per-token",
        metavar="X",
        type=float,
        help="seconds to pull one token's KV (default: the profile's transfer, else 2e-5)",
    )
    roles.add_argument(
        "--ec-transfer-time-per-token",
        metavar="X",
        type=float,
        help="seconds to receive one visual token's encoder output from an encode pod (default: the "
        "profile's transfer, else 5e-7)",
    )
    roles.add_argument(
        "--transfer-path",
        choices=["shared-memory", "network"],
        help="how encoder outputs and KV reach this pod, for the profile's transfer costs: shared-memory "
        "(one host) or network (default)",
    )

    add_kv_events_arguments(parser)

    faults = parser.add_argument_group("fault injection (also at run time: POST /admin/faults)")
    faults.add_argument("--fail-rate-429", metavar="X", type=float, help="fraction of requests answered 429")
    faults.add_argument("--fail-rate-500", metavar="X", type=float, help="fraction of requests answered 500")
    faults.add_argument("--fail-rate-503", metavar="X", type=float, help="fraction of requests answered 503")
    faults.add_argument(
        "--fail-rate-reset", metavar="X", type=float, help="fraction reset after the first streamed token"
    )
    faults.add_argument(
        "--slowdown", metavar="X", type=float, help="stretch every engine step by this factor"
    )
    faults.add_argument(
        "--stall", action="store_true", help="start stalled: accept requests, produce nothing"
    )


ENGINE_FLAGS = (
    "enable_prefix_caching",
    "encoder_cache_tokens",
    "mm_processor_cache_gb",
    "block_size",
    "num_gpu_blocks",
    "max_num_seqs",
    "max_num_batched_tokens",
    "disable_chunked_mm_input",
    "mm_encoder_tp_mode",
    "tensor_parallel_size",
)


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The pod settings the flags set (only those given, so a fleet file's defaults survive)."""
    out: dict[str, Any] = {}
    for name in (
        "profile",
        "host",
        "model",
        "family",
        "tokenizer",
        "time_scale",
        "seed",
        "natural_output_tokens",
    ):
        value = getattr(args, name)
        if value is not None:
            out[name] = value
    if args.tensor_parallel_size is not None and args.tensor_parallel_size < 1:
        raise ValueError(f"--tensor-parallel-size must be at least 1, not {args.tensor_parallel_size}")
    engine = {k: getattr(args, k) for k in ENGINE_FLAGS if getattr(args, k) is not None}
    if engine:
        out["engine"] = engine
    role = args.role
    if args.kv_transfer_config:
        config = json.loads(args.kv_transfer_config)
        if not isinstance(config, dict):
            raise ValueError("--kv-transfer-config must be a JSON object")
        role = role or role_from_kv_transfer_config(config).value
    if args.mm_encoder_only:
        role = Role.ENCODE.value
    if role is not None:
        out["role"] = role
    if args.kv_transfer_time_per_token is not None:
        out["kv_transfer_s_per_token"] = args.kv_transfer_time_per_token
    if args.ec_transfer_time_per_token is not None:
        out["ec_transfer_s_per_token"] = args.ec_transfer_time_per_token
    if args.transfer_path is not None:
        out["transfer_path"] = args.transfer_path
    if args.lora_modules:
        out["lora_modules"] = dict(lora_module(text) for text in args.lora_modules)
    if args.max_loras is not None:
        out["max_loras"] = args.max_loras
    if args.lora_load_time is not None:
        out["lora_load_s"] = args.lora_load_time
    if args.kv_events_config:
        out["kv_events"] = parse_kv_events_config(args.kv_events_config)
    if args.kv_events_format:
        out["kv_events_format"] = args.kv_events_format
    if args.kv_events_raw_hashes:
        out["kv_events_int_hashes"] = False
    faults = {
        "rate_429": args.fail_rate_429,
        "rate_500": args.fail_rate_500,
        "rate_503": args.fail_rate_503,
        "rate_reset": args.fail_rate_reset,
        "slowdown": args.slowdown,
        "stalled": True if args.stall else None,
    }
    if any(v is not None for v in faults.values()):
        out["faults"] = FaultSettings(**{k: v for k, v in faults.items() if v is not None})
    return out


def lora_module(text: str) -> tuple[str, str]:
    """One ``--lora-modules`` value: ``name=path``, or vLLM's JSON ``{"name": ..., "path": ...}``."""
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--lora-modules: not JSON: {exc}") from None
        name, path = (doc.get("name"), doc.get("path")) if isinstance(doc, dict) else (None, None)
        if not isinstance(name, str) or not isinstance(path, str) or not name or not path:
            raise ValueError('--lora-modules: a JSON module needs string "name" and "path"')
        return name, path
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"--lora-modules: expected NAME=PATH, got {text!r}")
    return name, path


def specs_from_args(args: argparse.Namespace) -> list[PodSpec]:
    overrides = overrides_from_args(args)
    if args.fleet:
        return load_fleet(args.fleet, overrides)
    if args.pods < 1:
        raise ValueError("--pods must be at least 1")
    return expand(overrides, [], base_port=args.base_port, pods=args.pods)


ROUTES = "/v1/chat/completions /v1/completions /v1/models /health /metrics /admin/faults"


def print_fleet(fleet: Any, fmt: str = "table") -> None:
    """The pods once they listen (``--format json`` prints what ``--endpoints-file`` writes)."""
    table = Table(
        columns("pod", "role", "model", "profile", "url", "kv events", "replay"),
        title=f"mmgate sim: {len(fleet)} pod(s)",
    )
    for pod in fleet:
        table.add(
            pod.name,
            pod.spec.role.value,
            pod.model,
            pod.spec.profile,
            pod.url,
            pod.kv_endpoint or "-",
            pod.kv_replay_endpoint or "-",
        )
    emit([table], fmt, data=endpoints_doc(fleet), notes=[f"endpoints: {ROUTES}"])


def endpoints_doc(fleet: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": pod.name,
            "role": pod.spec.role.value,
            "model": pod.model,
            "url": pod.url,
            "kv_events": pod.kv_endpoint,
            "kv_replay": pod.kv_replay_endpoint,
        }
        for pod in fleet
    ]


async def _serve(
    specs: list[PodSpec],
    duration: float | None,
    console: Console,
    endpoints_file: str | None = None,
    fmt: str = "table",
) -> None:
    from mmgate.sim.fleet import SimFleet

    stop = stop_signal()  # before start-up, so a signal during it is caught too
    async with SimFleet(specs) as fleet:
        print_fleet(fleet, fmt)
        if endpoints_file:
            tmp = Path(endpoints_file + ".tmp")
            tmp.write_text(json.dumps(endpoints_doc(fleet), indent=2))
            tmp.replace(endpoints_file)  # atomic: a reader never sees half a file
        console.print(
            "[dim]Ctrl-C to stop[/dim]" if duration is None else f"[dim]running for {duration:g}s[/dim]"
        )
        sys.stdout.flush()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), duration)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    console = Console(stderr=True)  # stdout carries the fleet table in the chosen --format
    try:
        specs = specs_from_args(args)
    except (ValueError, OSError) as exc:
        print(f"mmgate sim: {exc}", file=sys.stderr)
        return 2
    try:
        run_forever(lambda: _serve(specs, args.duration, console, args.endpoints_file, args.format))
    except ProfileError as exc:  # a misspelt --profile or a bad profile file: the user's to fix
        print(f"mmgate sim: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno is None:  # not a socket's refusal
            print(f"mmgate sim: {exc}", file=sys.stderr)
            return 1
        host = specs[0].host if specs else "127.0.0.1"
        print(f"mmgate sim: {listen_failure(exc, host, flag='--base-port')}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"mmgate sim: {exc}", file=sys.stderr)
        return 1
    return 0
