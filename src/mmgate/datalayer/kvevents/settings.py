"""Where each endpoint's KV events come from.

vLLM's publisher binds (or connects to) its ``--kv-events-config`` endpoint and, under data
parallelism, each rank adds its rank to the port; its replay ROUTER, when configured, follows the
same rule. A gateway therefore needs one SUB socket per (endpoint, rank): at the endpoint's own
``kvEvents`` address when it names one, else at ``tcp://<endpoint host>:<port>`` when a port is
configured for the fleet (llm-d's ``SocketPort``, 5557 in vLLM's default). In llm-d's centralised
mode the direction is reversed: the gateway binds one socket (per rank) and every pod connects to
it, naming itself in the topic ``kv@POD@MODEL``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgate.config.schema import EndpointSpec, MmgateSection
from mmgate.datalayer.endpoints import Endpoint
from mmgate.vllm.kv_events_config import offset_endpoint


@dataclass(slots=True, frozen=True)
class KVEventsSettings:
    """``mmgate.kvEvents`` (see :class:`mmgate.config.schema.KVEventsSpec` for each knob)."""

    port: int | None = None
    replay_port: int | None = None
    data_parallel_size: int = 1
    topic_filter: str = ""
    bind: str | None = None
    queue_size: int = 10_000
    replay_timeout_s: float = 2.0
    batches_per_tick: int = 64
    max_batch_bytes: int = 16 << 20  # ZMQ_MAXMSGSIZE: a larger message drops its sender's link
    max_publishers: int = 4096  # (endpoint, rank) sequence trackers kept; more are refused
    max_sequence_gap: int = 1_000_000  # a jump further ahead is a reset, not lost batches
    max_blocks_per_endpoint: int = 1_000_000  # the block index's LRU bound per endpoint


@dataclass(slots=True, frozen=True)
class Source:
    """One publisher to subscribe to: an endpoint's data-parallel rank."""

    endpoint: str
    rank: int
    address: str
    replay: str | None = None


def sources_of(endpoint: Endpoint, settings: KVEventsSettings) -> list[Source]:
    """The SUB sockets an endpoint needs (none when neither it nor the settings give an address)."""
    base = endpoint.kv_events
    if base is None and settings.port is not None:
        base = f"tcp://{endpoint.host}:{settings.port}"
    if base is None:
        return []
    replay = endpoint.kv_replay
    if replay is None and settings.replay_port is not None:
        replay = f"tcp://{endpoint.host}:{settings.replay_port}"
    return [
        Source(
            endpoint.name,
            rank,
            offset_endpoint(base, rank),
            None if replay is None else offset_endpoint(replay, rank),
        )
        for rank in range(settings.data_parallel_size)
    ]


def pod_of_topic(topic: bytes) -> str | None:
    """The POD part of llm-d's ``kv@POD@MODEL`` topic (None for any other shape)."""
    parts = topic.decode("utf-8", "replace").split("@", 2)
    if len(parts) < 2 or parts[0] != "kv" or not parts[1]:
        return None
    return parts[1]


def kv_events_settings_of(section: MmgateSection) -> KVEventsSettings | None:
    """``mmgate.kvEvents`` (or any endpoint's ``kvEvents``) as subscriber settings; None: off."""
    kv = section.kvEvents
    if kv is None:
        wanted = any(isinstance(e, EndpointSpec) and e.kvEvents for e in section.endpoints)
        return KVEventsSettings() if wanted else None
    return KVEventsSettings(
        port=kv.port,
        replay_port=kv.replayPort,
        data_parallel_size=kv.dataParallelSize,
        topic_filter=kv.topicFilter,
        bind=kv.bind,
        queue_size=kv.queueSize,
        replay_timeout_s=kv.replayTimeoutS,
        batches_per_tick=kv.batchesPerTick,
        max_batch_bytes=kv.maxBatchBytes,
        max_publishers=kv.maxPublishers,
        max_sequence_gap=kv.maxSequenceGap,
        max_blocks_per_endpoint=kv.maxBlocksPerEndpoint,
    )
