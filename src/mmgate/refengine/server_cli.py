"""``mmgate engine``: serve a real vision-language model on CPU, with the simulator's API."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
from typing import TYPE_CHECKING, Any

from mmgate.arguments import port
from mmgate.modelserver.flags import add_cache_arguments, add_kv_events_arguments
from mmgate.process import stop_signal
from mmgate.vllm.blocks import HASH_ALGOS
from mmgate.vllm.kv_events_config import parse_kv_events_config
from mmgate.vllm.kvevents import WireFormat

if TYPE_CHECKING:
    from mmgate.refengine.runtime import EngineConfig
    from mmgate.refengine.server import ServerSettings

DESCRIPTION = """\
Serve a vision-language model with Hugging Face transformers on CPU, behind the same HTTP surface as
`mmgate sim`: POST /v1/chat/completions (streaming too), GET /v1/models, /health, /metrics (vLLM's
names; the encoder cache as mmgate_engine:encoder_cache_*), and KV events over ZMQ in vLLM's format.
Three caches make a repeated image and a follow-up turn cheap, each switchable:
  processor cache  preprocessed pixels by media identity      (--mm-processor-cache-gb, 0 = off)
  encoder cache    image features by media identity, LRU       (--encoder-cache-tokens, 0 = off)
  prefix cache     KV of the longest cached block-aligned prefix, blocks keyed with the images'
                   identities as vLLM keys them                (--enable-prefix-caching, --block-size)
A media identity is the gateway's own (the part's uuid, else the hash of its base64 text), so a
gateway in front knows which engine holds an image. Decoding is greedy. Nothing is downloaded:
--model reads a local directory. See docs/engine.md."""

EPILOG = """\
examples:
  mmgate engine --tiny qwen2-vl --port 8100                 # a tiny random model: tests, demos
  mmgate engine --model ~/models/Qwen2-VL-2B-Instruct --port 8100
  mmgate engine --tiny qwen2-vl --encoder-cache-tokens 0 --no-enable-prefix-caching   # stateless
  mmgate engine --tiny qwen2-vl --kv-events-config '{"enable_kv_cache_events": true,
                "endpoint": "tcp://*:5557", "topic": "kv@{host}:{port}@{model}"}'
"""


def _tiny_archs() -> str:
    try:
        from mmgate.refengine.model import TINY_ARCHS
    except ImportError:
        return "needs mmgate[engine]"
    return ", ".join(TINY_ARCHS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    model = parser.add_argument_group("model (one of)")
    which = model.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--tiny", metavar="ARCH", help=f"a tiny randomly initialised model of ARCH ({_tiny_archs()})"
    )
    which.add_argument("--model", metavar="DIR", help="a local model directory (never downloaded)")
    model.add_argument("--served-model-name", metavar="NAME", help="model id to serve (default: the model's)")
    model.add_argument("--seed", metavar="N", type=int, default=0, help="--tiny: weight seed (default 0)")

    server = parser.add_argument_group("server")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    server.add_argument("--port", type=port, default=8000, help="port; 0 picks a free one (default 8000)")
    server.add_argument(
        "--name", help="this engine's name in the x-mmgate-engine header and KV topics (default engine-PORT)"
    )
    server.add_argument(
        "--threads",
        metavar="N",
        type=int,
        default=1,
        help="torch threads for the model (default 1: steady on a shared machine; a laptop of your own "
        "runs a real model faster with its core count)",
    )
    server.add_argument(
        "--default-max-tokens",
        metavar="N",
        type=int,
        default=256,
        help="reply length limit when a request sets none (default 256)",
    )

    engine = parser.add_argument_group("engine (vLLM flag names)")
    add_cache_arguments(engine, capacity_help="prefix-cache capacity in KV blocks (default 4096)")
    engine.add_argument("--max-model-len", metavar="N", type=int, help="prompt + reply limit in tokens")
    engine.add_argument(
        "--prefix-caching-hash-algo",
        choices=HASH_ALGOS,
        help="block-key hash, as vLLM's flag (default sha256); match it in a precise-prefix gateway",
    )
    add_kv_events_arguments(parser)

    roles = parser.add_argument_group("disaggregation (E/PD)")
    roles.add_argument(
        "--mm-encoder-only",
        action="store_true",
        help="encode images only: a chat request is answered with ec_transfer_params naming the "
        "features, which wait on --ec-transfer-port for the prefill engine to fetch",
    )
    roles.add_argument(
        "--ec-transfer-port",
        metavar="P",
        type=port,
        default=0,
        help="--mm-encoder-only: the features' TCP port on --host (default 0: a free port, printed)",
    )
    roles.add_argument(
        "--ec-advertised-host",
        metavar="HOST",
        help="--mm-encoder-only: the address ec_transfer_params name for the features (default --host; "
        "set it to the pod's own address when --host is 0.0.0.0)",
    )
    roles.add_argument(
        "--ec-allowed-host",
        metavar="HOST",
        action="append",
        default=[],
        help="a host this engine may fetch features from when a request's ec_transfer_params name it "
        "(repeatable; loopback is always allowed, nothing else unless listed)",
    )


_AT_LEAST = {
    "block_size": 1,
    "max_num_seqs": 1,
    "max_model_len": 1,
    "num_gpu_blocks": 0,
    "encoder_cache_tokens": 0,
    "mm_processor_cache_gb": 0,
    "default_max_tokens": 1,
    "threads": 1,
}


def check_ranges(args: argparse.Namespace) -> None:
    """``ValueError`` naming the first numeric flag out of range."""
    for name, low in _AT_LEAST.items():
        value = getattr(args, name)
        if value is not None and value < low:
            raise ValueError(f"--{name.replace('_', '-')} must be at least {low}, not {value}")


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The engine's config from the flags given (the engine's defaults for the others)."""
    from mmgate.refengine.runtime import EngineConfig

    given: dict[str, Any] = {
        "enable_prefix_caching": args.enable_prefix_caching,
        "block_size": args.block_size,
        "prefix_cache_blocks": args.num_gpu_blocks,
        "encoder_cache_tokens": args.encoder_cache_tokens,
        "processor_cache_bytes": None
        if args.mm_processor_cache_gb is None
        else int(args.mm_processor_cache_gb * (1 << 30)),
        "max_num_seqs": args.max_num_seqs,
        "max_model_len": args.max_model_len,
        "prefix_caching_hash_algo": args.prefix_caching_hash_algo,
    }
    return dataclasses.replace(EngineConfig(), **{k: v for k, v in given.items() if v is not None})


def server_settings(args: argparse.Namespace) -> ServerSettings:
    from mmgate.refengine.server import ServerSettings

    kv = parse_kv_events_config(args.kv_events_config) if args.kv_events_config else None
    return ServerSettings(
        name=args.name or f"engine-{args.port}",
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        default_max_tokens=args.default_max_tokens,
        kv_events=kv,
        kv_events_format=WireFormat(args.kv_events_format) if args.kv_events_format else WireFormat.CURRENT,
        kv_events_int_hashes=not args.kv_events_raw_hashes,
        encoder_only=args.mm_encoder_only,
        ec_transfer_port=args.ec_transfer_port,
        ec_advertised_host=args.ec_advertised_host,
    )


async def _serve(args: argparse.Namespace, config: EngineConfig, settings: ServerSettings) -> None:
    import torch

    from mmgate.refengine.model import load_model, tiny_model
    from mmgate.refengine.runtime import Engine
    from mmgate.refengine.server import EngineServer
    from mmgate.refengine.transfer import FeatureClient

    torch.set_num_threads(args.threads)
    model = tiny_model(args.tiny, seed=args.seed) if args.tiny else load_model(args.model)
    fetch = FeatureClient(args.ec_allowed_host)  # the prefill side of E/PD, for any request naming features
    server = EngineServer(Engine(model, config, fetch_features=fetch), settings)
    stop = stop_signal()  # before start-up, so a signal during it is caught too
    await server.start()
    try:
        kv = f", KV events on {server.kv_endpoint}" if server.kv_endpoint else ""
        ec = server.ec_address
        role = f", encode only (features on {ec[0]}:{ec[1]})" if ec is not None else ""
        print(f"mmgate engine: {server.model} on {server.url}{kv}{role}", flush=True)
        await stop.wait()
    finally:
        await server.stop()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        check_ranges(args)
        settings = server_settings(args)
        if args.tiny:
            from mmgate.refengine.model import TINY_ARCHS

            if args.tiny not in TINY_ARCHS:
                raise ValueError(f"--tiny {args.tiny!r}: choose one of {', '.join(TINY_ARCHS)}")
        config = engine_config(args)
    except ValueError as exc:
        print(f"mmgate engine: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(args, config, settings))
    except ValueError as exc:  # a model directory the engine cannot run, a bad KV endpoint
        print(f"mmgate engine: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the port is taken
        print(f"mmgate engine: {exc}", file=sys.stderr)
        return 1
    return 0
