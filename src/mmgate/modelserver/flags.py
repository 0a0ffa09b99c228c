"""Command-line flags both model servers take under vLLM's names (``mmgate sim``, ``mmgate engine``),
so a command line moves between a simulated pod, the reference engine and a real vLLM unchanged."""

from __future__ import annotations

import argparse

from mmgate.vllm.kvevents import WireFormat


def add_cache_arguments(group: argparse._ArgumentGroup, *, capacity_help: str) -> None:
    """The cache flags: prefix cache on/off, encoder and processor cache sizes, block size, the KV
    capacity in blocks (``capacity_help`` says what it overrides), the batch width."""
    group.add_argument(
        "--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None, help="KV prefix cache"
    )
    group.add_argument(
        "--encoder-cache-tokens", metavar="N", type=int, help="encoder-cache capacity in embeddings; 0 = off"
    )
    group.add_argument(
        "--mm-processor-cache-gb", metavar="X", type=float, help="processor cache size in GiB; 0 = off"
    )
    group.add_argument("--block-size", metavar="N", type=int, help="KV block size in tokens")
    group.add_argument("--num-gpu-blocks", metavar="N", type=int, help=capacity_help)
    group.add_argument("--max-num-seqs", metavar="N", type=int, help="max running sequences")


def add_kv_events_arguments(parser: argparse.ArgumentParser) -> None:
    """vLLM's ``--kv-events-config`` and the two wire choices mmgate adds for older subscribers."""
    events = parser.add_argument_group("KV events")
    events.add_argument("--kv-events-config", metavar="JSON", help="vLLM's --kv-events-config JSON")
    events.add_argument(
        "--kv-events-format",
        choices=[f.value for f in WireFormat],
        help="current: tagged maps (current vLLM); legacy: tagged arrays (older vLLM, llm-d sim default)",
    )
    events.add_argument(
        "--kv-events-raw-hashes",
        action="store_true",
        help="publish raw digests (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)",
    )
