"""The counters a model server's engine reports, one snapshot per scrape or step.

The simulator's core and the reference engine both fill :class:`EngineStats`, so ``/metrics``
(:class:`mmgate.modelserver.metrics.ServerMetrics`) shows the same quantities, with vLLM's
meanings, whichever engine answers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineStats"]


@dataclass(frozen=True, slots=True)
class EngineStats:
    """A snapshot for ``/metrics``. Cache counters are cumulative; prefix cache in tokens,
    encoder and processor caches in items. ``kv_cache_usage`` is vLLM's
    ``1 - free_blocks / (num_gpu_blocks - 1)`` (cached-but-unused blocks count as free)."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    encoder_cache_queries: int
    encoder_cache_hits: int
    processor_cache_queries: int
    processor_cache_hits: int
    num_gpu_blocks: int
    block_size: int
    num_preemptions: int
    encoder_cache_used_tokens: int
    encoder_cache_capacity_tokens: int
    prompt_tokens: int
    generation_tokens: int
