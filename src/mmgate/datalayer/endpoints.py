"""Endpoints the gateway routes to, and what it currently believes about each one.

An endpoint's ``name`` is ``host:port``: the key of every per-endpoint index (prefix LRU,
encoder-cache LRU, in-flight load) and the value of the ``x-mmgate-endpoint`` response header.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from mmgate.datalayer.health import Health
from mmgate.datalayer.metrics import MetricsSnapshot
from mmgate.vllm.lora import Adapter


@dataclass(slots=True, frozen=True)
class Endpoint:
    """One model server: where it is, what role it plays (``None`` = serves everything), its
    labels (llm-d reads pod labels such as ``llm-d.ai/role``), as sorted pairs, and where it
    publishes KV events (a ZMQ address, and its replay socket), when it says so itself."""

    name: str
    url: str
    role: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    kv_events: str | None = None
    kv_replay: str | None = None

    @property
    def host(self) -> str:
        """The host part of ``name`` (IPv6 in brackets, as in the name)."""
        return self.name.rpartition(":")[0]


def parse_endpoint(
    text: str,
    *,
    role: str | None = None,
    labels: Mapping[str, str] | None = None,
    kv_events: str | None = None,
    kv_replay: str | None = None,
) -> Endpoint:
    """``host:port``, ``http://host:port`` or ``https://host:port[/]`` → :class:`Endpoint`.

    Raises ``ValueError`` with the offending text when it is not a usable address.
    """
    for what, zmq_address in (("kvEvents", kv_events), ("kvEventsReplay", kv_replay)):
        if zmq_address is not None and "://" not in zmq_address:
            raise ValueError(f"{what} {zmq_address!r}: expected a ZMQ address such as tcp://HOST:PORT")
    raw = text.strip()
    if not raw:
        raise ValueError("empty endpoint address")
    spec = raw if "://" in raw else f"http://{raw}"
    parts = urlsplit(spec)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"endpoint {raw!r}: scheme must be http or https")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"endpoint {raw!r}: {exc}") from None
    if not parts.hostname or port is None:
        raise ValueError(f"endpoint {raw!r}: expected host:port (e.g. 127.0.0.1:8000)")
    if parts.path not in ("", "/"):
        raise ValueError(f"endpoint {raw!r}: give the server root, not a path")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    pairs = tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items()))
    return Endpoint(
        name=f"{host}:{port}",
        url=f"{parts.scheme}://{host}:{port}",
        role=role,
        labels=pairs,
        kv_events=kv_events,
        kv_replay=kv_replay,
    )


@dataclass(slots=True)
class EndpointRecord:
    """The gateway's live knowledge of one endpoint: health, last metrics, served models."""

    endpoint: Endpoint
    health: Health = field(default_factory=Health)
    metrics: MetricsSnapshot | None = None
    models: tuple[str, ...] = ()
    model_cards: tuple[dict[str, Any], ...] = ()  # the /v1/models objects behind ``models``
    adapters: dict[str, Adapter] = field(default_factory=dict)  # LoRA adapters, from the cards

    @property
    def name(self) -> str:
        return self.endpoint.name

    def fresh_metrics(self, now: float, staleness_s: float) -> MetricsSnapshot | None:
        """The last snapshot if younger than ``staleness_s``, else ``None`` (not to be trusted)."""
        snap = self.metrics
        if snap is None or now - snap.scraped_at > staleness_s:
            return None
        return snap


Listener = Callable[[Endpoint], None]


class EndpointRegistry:
    """The current endpoint set. Discovery calls :meth:`sync`; others subscribe to changes.

    Removal listeners are how per-endpoint state elsewhere (scheduler indexes, scrape loops,
    connection pools) forgets an endpoint: nothing keeps a removed endpoint alive.
    """

    def __init__(self, *, failure_threshold: int = 3) -> None:
        self.failure_threshold = failure_threshold
        self._records: dict[str, EndpointRecord] = {}
        self._on_add: list[Listener] = []
        self._on_remove: list[Listener] = []

    def on_add(self, listener: Listener) -> None:
        self._on_add.append(listener)

    def on_remove(self, listener: Listener) -> None:
        self._on_remove.append(listener)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def get(self, name: str) -> EndpointRecord | None:
        return self._records.get(name)

    def records(self) -> list[EndpointRecord]:
        return list(self._records.values())

    def each(self) -> Iterable[EndpointRecord]:
        """The records without a copy (a read-only view, in the order they were added): for a
        pass on every request that keeps none of them and adds or removes none meanwhile."""
        return self._records.values()

    def models(self) -> list[str]:
        """The union of the models the endpoints serve, in first-seen order."""
        return [card["id"] for card in self.model_cards()]

    def model_cards(self) -> list[dict[str, Any]]:
        """One ``/v1/models`` object per model id served (the first endpoint's)."""
        seen: dict[str, dict[str, Any]] = {}
        for record in self._records.values():
            for card in record.model_cards:
                seen.setdefault(card["id"], card)
        return list(seen.values())

    def add(self, endpoint: Endpoint) -> EndpointRecord:
        record = self._records.get(endpoint.name)
        if record is not None:
            if record.endpoint != endpoint:  # role or scheme changed: keep health, update address
                record.endpoint = endpoint
            return record
        record = EndpointRecord(endpoint, Health(failure_threshold=self.failure_threshold))
        self._records[endpoint.name] = record
        for listener in self._on_add:
            listener(endpoint)
        return record

    def remove(self, name: str) -> bool:
        record = self._records.pop(name, None)
        if record is None:
            return False
        for listener in self._on_remove:
            listener(record.endpoint)
        return True

    def sync(self, endpoints: Iterable[Endpoint]) -> tuple[list[str], list[str]]:
        """Make the set equal to ``endpoints``; return the names added and removed."""
        wanted = {e.name: e for e in endpoints}
        removed = [name for name in self._records if name not in wanted]
        for name in removed:
            self.remove(name)
        added = [name for name in wanted if name not in self._records]
        for endpoint in wanted.values():
            self.add(endpoint)
        return added, removed
