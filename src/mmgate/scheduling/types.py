"""What the scheduler reads and returns.

The data layer (or the discrete-event benchmark) keeps one :class:`EndpointState` per endpoint
and refreshes its ``metrics`` after each scrape; the scheduler's lifecycle callbacks keep its
``inflight`` counters. Scheduling itself only reads them: it takes ``now`` as an argument and never
looks at a clock, so the same code runs in wall time behind HTTP and in virtual time in the DES.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from mmgate.request.view import RequestView
from mmgate.vllm.lora import LoraState

T = TypeVar("T")

ROLE_LABEL = "llm-d.ai/role"
# llm-d's routing headers for the decode pod's sidecar (pkg/common/routing): the prefill pod, and
# the encoders (comma-joined; mmgate names one per distinct media item, in prompt order).
PREFILLER_HEADER = "x-prefiller-host-port"
ENCODERS_HEADER = "x-encoder-hosts-ports"


class MetricsView(Protocol):
    """A scraped metrics snapshot. ``None`` means the page did not carry the metric.

    The data layer's snapshot type satisfies this structurally; :class:`Metrics` is a plain one
    for tests and the simulator. ``scraped_at`` is on the same clock as the ``now`` given to
    :meth:`Scheduler.schedule`.
    """

    @property
    def waiting(self) -> float | None: ...
    @property
    def running(self) -> float | None: ...
    @property
    def kv_usage(self) -> float | None: ...
    @property
    def block_size(self) -> int | None: ...
    @property
    def num_gpu_blocks(self) -> int | None: ...
    @property
    def scraped_at(self) -> float: ...
    @property
    def lora(self) -> LoraState | None: ...


@dataclass(slots=True, frozen=True)
class Metrics:
    """vLLM's ``num_requests_waiting``/``running``, ``kv_cache_usage_perc`` (0..1) and
    ``cache_config_info`` block size and count, as of ``scraped_at``."""

    waiting: float | None = 0
    running: float | None = 0
    kv_usage: float | None = 0.0
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    scraped_at: float = 0.0
    lora: LoraState | None = None  # the endpoint's LoRA adapters (mmgate.vllm.lora)


@dataclass(slots=True)
class InFlight:
    """The gateway's own view of work it has sent to an endpoint and not yet seen finish.

    ``requests`` counts started-but-unfinished requests. ``tokens`` are the prompt tokens still to
    be prefilled (llm-d's ``InFlightLoad.Tokens``: released at the first response chunk unless
    output estimates are enabled); ``media_tokens`` is the part of ``tokens`` that is media.
    """

    requests: int = 0
    tokens: int = 0
    media_tokens: int = 0


@dataclass(slots=True, eq=False)
class EndpointState:
    """One endpoint as the scheduler sees it. ``name`` (``host:port``) keys every index.

    ``role`` and ``labels`` are fixed for the life of the state: the data layer makes a new state
    when an endpoint's role or labels change (role filters remember their answer per list of
    states). ``metrics`` and ``inflight`` change all the time."""

    name: str
    url: str = ""
    role: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    metrics: MetricsView | None = None
    inflight: InFlight = field(default_factory=InFlight)

    @property
    def effective_role(self) -> str | None:
        """The configured role, else the pod's ``llm-d.ai/role`` label (what role filters match)."""
        return self.role if self.role is not None else self.labels.get(ROLE_LABEL)

    def metrics_age(self, now: float) -> float | None:
        """Seconds since the last scrape, or ``None`` when never scraped."""
        m = self.metrics
        return None if m is None else now - m.scraped_at

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> EndpointState:
        """Convenience for tests and the DES: ``http://host:port`` → name ``host:port``."""
        name = url.split("://", 1)[-1].rstrip("/")
        return cls(name=name, url=url if "://" in url else f"http://{url}", **kwargs)


class DataKey(Generic[T]):
    """A typed slot in a request's data bag: producers ``put`` and consumers ``get`` by key.

    A producer named other than its type also publishes under ``key.scoped(name)`` so a consumer
    can ask for one producer's data (llm-d's ``...ProducerName`` parameters).
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def scoped(self, producer_name: str | None) -> DataKey[T]:
        return self if not producer_name else DataKey(f"{self.name}@{producer_name}")

    def __repr__(self) -> str:
        return f"DataKey({self.name!r})"


class SchedulingRequest:
    """One request being scheduled: the parsed view, its id and headers, and the data bag.

    The same object is passed to :meth:`Scheduler.schedule`, the PreRequest hooks and the
    lifecycle callbacks, so producers can leave data for their own later hooks. PreRequest hooks
    that run before the request is sent (llm-d's ``prefill-header-handler``) leave the routing
    headers the upstream request must carry with :meth:`set_upstream_header`.
    """

    __slots__ = (
        "data", "debug", "headers", "now", "request_id", "staleness_s", "tenant", "upstream_headers", "view",
    )  # fmt: skip

    def __init__(
        self,
        view: RequestView,
        request_id: str,
        headers: Mapping[str, str] | None = None,
        *,
        debug: bool = False,
        tenant: str | None = None,
    ) -> None:
        self.view = view
        self.request_id = request_id
        self.tenant = tenant  # the verified API key's tenant (authentication on), for per-tenant policy
        self.headers: Mapping[str, str] = headers if headers is not None else {}
        self.data: dict[str, object] = {}
        self.debug = debug
        self.now = 0.0
        self.staleness_s = math.inf
        self.upstream_headers: dict[str, str] | None = None  # made on the first header set

    def set_upstream_header(self, name: str, value: str) -> None:
        """Have the upstream request carry ``name: value`` (lower-case routing header names)."""
        if self.upstream_headers is None:
            self.upstream_headers = {}
        self.upstream_headers[name] = value

    def get(self, key: DataKey[T]) -> T | None:
        return self.data.get(key.name)  # type: ignore[return-value]  # put() keeps key and value in step

    def put(self, key: DataKey[T], value: T) -> None:
        self.data[key.name] = value

    def fresh_metrics(self, endpoint: EndpointState) -> MetricsView | None:
        """The endpoint's metrics if scraped within the staleness threshold, else ``None``:
        stale numbers are not trusted (scorers treat them as unknown)."""
        m = endpoint.metrics
        if m is None or self.now - m.scraped_at > self.staleness_s:
            return None
        return m


class ProfileResult(msgspec.Struct):
    """The outcome of one profile: chosen ``targets`` (best first) and every candidate's score.

    ``candidates``/``scores`` are aligned and cover the endpoints that passed the filters;
    ``by_scorer`` holds each scorer's raw scores when the request asked for debug output. A
    routing-header hook that splits a stage over several pods (``encoder-header-handler``'s
    per-item plan) makes those pods the targets before the request is sent, so every pod that
    works for the request is charged with it.
    """

    targets: list[EndpointState]
    candidates: list[EndpointState]
    scores: list[float]
    by_scorer: dict[str, list[float]] | None = None

    def ranked(self) -> list[EndpointState]:
        """Candidates best first (targets first): the order to retry in."""
        order = sorted(range(len(self.candidates)), key=lambda i: -self.scores[i])
        rest = [self.candidates[i] for i in order if self.candidates[i] not in self.targets]
        return [*self.targets, *rest]


class SchedulingResult(msgspec.Struct):
    """Every profile's result; ``primary_profile`` names the one whose target serves the request."""

    profiles: dict[str, ProfileResult | None]
    primary_profile: str

    @property
    def primary(self) -> ProfileResult:
        result = self.profiles.get(self.primary_profile)
        if result is None or not result.targets:
            raise NoEndpointsError(f"profile {self.primary_profile!r} produced no target")
        return result

    @property
    def target(self) -> EndpointState:
        """The endpoint to send the request to."""
        return self.primary.targets[0]

    def targets_of(self, profile: str) -> list[EndpointState]:
        result = self.profiles.get(profile)
        return [] if result is None else result.targets


class NoEndpointsError(RuntimeError):
    """No endpoint can take the request (none known, or every one filtered out): a 503."""
