"""vLLM's ``--kv-events-config`` and its endpoint rules, shared by publishers and subscribers.

A simulated pod reads the same JSON a vLLM server takes; a subscriber that knows one pod's config
must derive the same socket addresses vLLM does (bind vs connect, one port per data-parallel rank).
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import zmq

__all__ = ["KVEventsConfig", "binds", "bound_endpoint", "offset_endpoint", "parse_kv_events_config"]


class KVEventsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """vLLM's ``--kv-events-config`` (same field names, same defaults)."""

    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    # Accepted so vLLM's JSON can be pasted; never binds: vLLM bounds the batches waiting for its
    # publisher thread, and a simulated pod sends each step's batch inside the step (docs/sim.md).
    max_queue_size: int = 100_000
    topic: str = ""

    @property
    def active(self) -> bool:
        return self.enable_kv_cache_events and self.resolved_publisher == "zmq"

    @property
    def resolved_publisher(self) -> str:
        if self.publisher is not None:
            return self.publisher
        return "zmq" if self.enable_kv_cache_events else "null"


def parse_kv_events_config(text: str) -> KVEventsConfig:
    """Decode the JSON given to ``--kv-events-config``; a clear ``ValueError`` on mistakes."""
    try:
        config = msgspec.json.decode(text.encode(), type=KVEventsConfig)
    except msgspec.DecodeError as exc:
        raise ValueError(f"--kv-events-config: {exc}") from None
    if config.resolved_publisher not in ("null", "zmq"):
        raise ValueError(f"--kv-events-config: unknown publisher {config.publisher!r} (null or zmq)")
    if config.buffer_steps < 1 or config.hwm < 0:
        raise ValueError("--kv-events-config: buffer_steps must be >= 1 and hwm >= 0")
    return config


def offset_endpoint(endpoint: str, index: int) -> str:
    """The endpoint of data-parallel rank ``index`` (or the ``index``-th pod sharing one config).

    vLLM adds the rank to TCP ports (a wildcard or 0 port stays as it is, the OS picks one) and
    suffixes ``inproc``/``ipc`` names with ``_dp{index}``.
    """
    if index == 0:
        return endpoint
    if endpoint.startswith(("inproc://", "ipc://")):
        return f"{endpoint}_dp{index}"
    head, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or int(port) == 0:
        return endpoint
    return f"{head}:{int(port) + index}"


def binds(endpoint: str) -> bool:
    """vLLM's rule for its PUB socket: bind wildcard and ipc/inproc endpoints, connect to everything
    else (so a subscriber connects where a pod binds, and binds where pods connect)."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def bound_endpoint(sock: zmq.Socket[Any], fallback: str) -> str:
    """The concrete endpoint after a bind (wildcard ports resolved), for printing and clients."""
    with contextlib.suppress(zmq.ZMQError):
        last = sock.getsockopt(zmq.LAST_ENDPOINT)
        if isinstance(last, bytes) and last:
            return last.decode()
    return fallback
