"""The precise index in virtual time: each simulated engine's own KV events, as a gateway gets them.

A system with ``precise-prefix-cache-producer`` routes on what the pods report. In the
discrete-event mode nothing travels over ZMQ, but the path is otherwise the production one: the
engine's step output carries its KV events, they are encoded as a vLLM pod publishes them
(:func:`mmgate.modelserver.kv_publisher.to_wire`, :func:`mmgate.vllm.kvevents.encode_batch`), decoded as
the subscriber decodes them and applied by :func:`mmgate.datalayer.kvevents.apply.apply_batch`,
one network delay after the step that produced them. Evictions reach the index the same way, so
under KV pressure the index forgets what the pods forgot.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import msgspec

from mmgate.config.schema import EndpointPickerConfig
from mmgate.datalayer.index.memory import AffinityIndex
from mmgate.datalayer.kvevents.apply import apply_batch
from mmgate.modelserver.events import KVEvent
from mmgate.modelserver.kv_publisher import to_wire
from mmgate.scheduling.plugins.precise_prefix_cache_producer import PreciseParams, TokenProcessorConfig
from mmgate.vllm.kvevents import WireFormat, decode_batch, encode_batch

PRECISE = "precise-prefix-cache-producer"


def precise_hashing(picker: EndpointPickerConfig) -> TokenProcessorConfig | None:
    """How the config's precise producer computes block keys (the engines must hash alike), or
    ``None`` when the config has no precise producer."""
    for plugin in picker.plugins:
        if plugin.type == PRECISE:
            return msgspec.convert(plugin.parameters or {}, PreciseParams).tokenProcessorConfig
    return None


class KVEventFeed:
    """The block index a precise system's scheduler reads, fed from the engines' events."""

    def __init__(self) -> None:
        self.index: AffinityIndex[Hashable] = AffinityIndex()
        self.batches = 0
        self.events = 0

    def apply(self, endpoint: str, events: Sequence[KVEvent], ts: float) -> None:
        """One step's events from ``endpoint``, through the wire encoding and back."""
        wire: list[Any] = [to_wire(e, WireFormat.CURRENT) for e in events]
        batch = decode_batch(encode_batch(wire, WireFormat.CURRENT, ts))
        apply_batch(self.index, endpoint, 0, batch)
        self.batches += 1
        self.events += len(events)
