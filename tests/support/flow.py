"""A one-pod fleet on a virtual clock for the pure flow-control tests: the pod runs one request
at a time for as long as the request's cost says, and the dispatcher is driven exactly as the
request controller drives it (submit, placed at release, finished then pump)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from mmgate.config import load_config_text
from mmgate.control import RequestController
from mmgate.control.decision import EndpointPicker
from mmgate.control.flow import FlowGate, flow_settings_of
from mmgate.control.flow.classify import FlowKey
from mmgate.control.flow.dispatcher import BandPlan, DispatcherLimits, FlowDispatcher
from mmgate.control.flow.policies import FairnessPolicy
from mmgate.control.flow.queues import BandLimits, HeldRequest
from mmgate.control.flow.saturation import DetectorSettings, SaturationDetector
from mmgate.datalayer.endpoints import EndpointRegistry, parse_endpoint
from mmgate.datalayer.metrics import MetricsSnapshot

POD = "pod:1"


def plan(policy: Callable[[], FairnessPolicy], **limits: object) -> Callable[[int], BandPlan]:
    def band_of(priority: int) -> BandPlan:
        hold = priority >= 0 or bool(limits.get("max_requests"))
        return BandPlan(BandLimits(hold=hold, **limits), False, 0.0, None, policy)  # type: ignore[arg-type]

    return band_of


@dataclass
class OnePod:
    """``slots`` requests at once; everything else is held by flow control."""

    band_of: Callable[[int], BandPlan]
    slots: int = 1
    limits: DispatcherLimits = field(default_factory=DispatcherLimits)
    now: float = 0.0
    served: dict[str, float] = field(default_factory=dict)  # cost served per fairness id
    order: list[str] = field(default_factory=list)  # request names in dispatch order
    refused: dict[str, str] = field(default_factory=dict)  # request name -> reason
    waits: dict[str, list[float]] = field(default_factory=dict)  # per fairness id
    _events: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        detector = SaturationDetector(DetectorSettings(queue_depth=10**9, max_inflight_requests=self.slots))
        self.dispatcher = FlowDispatcher(detector, self._metrics, self.band_of, self.limits)

    def _metrics(self, name: str) -> MetricsSnapshot:
        return MetricsSnapshot("vllm", waiting=0.0, kv_usage=0.0, scraped_at=self.now)

    def at(self, t: float, call: Callable[[], None]) -> None:
        heapq.heappush(self._events, (t, next(self._seq), call))

    def send(
        self, name: str, fairness_id: str, cost: float, *, priority: int = 0, size: int = 0,
        deadline: float = float("inf"),
    ) -> HeldRequest:  # fmt: skip
        arrived = self.now

        def release() -> None:
            self.order.append(name)
            self.served[fairness_id] = self.served.get(fairness_id, 0.0) + cost
            self.waits.setdefault(fairness_id, []).append(self.now - arrived)
            self.dispatcher.placed(POD, 0)
            self.at(self.now + cost, self._finished)

        def reject(reason: str) -> None:
            self.refused[name] = reason

        item = HeldRequest(
            FlowKey(fairness_id, priority), (POD,), arrived=self.now, size=size, cost=cost,
            deadline=deadline, release=release, reject=reject,
        )  # fmt: skip
        self.dispatcher.submit(item, self.now)
        return item

    def _finished(self) -> None:
        self.dispatcher.finished(POD, 0)
        self.dispatcher.pump(self.now)

    def run(self, until: float) -> None:
        while self._events and self._events[0][0] <= until:
            t, _, call = heapq.heappop(self._events)
            self.now = t
            call()
        self.now = until


FLOW_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: round-robin-picker
- type: utilization-detector
  parameters: {queueDepthThreshold: 1000, maxInflightRequests: 1}
- type: media-cost-fairness-policy
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: round-robin-picker
flowControl:
  maxBytes: %(max_bytes)s
  defaultRequestTTL: 60s
  saturationDetector: {pluginRef: utilization-detector}
  defaultPriorityBand: {fairnessPolicyRef: media-cost-fairness-policy}
mmgate:
  inferenceObjectives:
  - {name: critical, priority: 10}
  - {name: standard, priority: 0}
  - {name: batch, priority: -1}
"""


def flow_config(max_bytes: int = 0) -> str:
    """Flow control on, a pod saturated while the gateway has one request in flight there (what
    the gateway knows at once: the order is deterministic), and three objectives."""
    return FLOW_CONFIG % {"max_bytes": max_bytes}


def one_pod_controller(
    config_text: str, picker: EndpointPicker, gate_type: type[FlowGate] = FlowGate, pod: str = "10.0.0.1:8000"
) -> tuple[RequestController, FlowGate]:
    """A request controller with flow control from ``config_text`` over one idle pod (its
    metrics scraped at time 0), on a clock that stays at 0: the controller-level flow tests."""
    config = load_config_text(config_text)
    settings = flow_settings_of(config.picker, config.mmgate)
    assert settings is not None
    registry = EndpointRegistry()
    registry.add(parse_endpoint(pod))
    record = registry.get(pod)
    assert record is not None
    metrics = record.metrics = MetricsSnapshot("vllm", waiting=0.0, kv_usage=0.0, scraped_at=0.0)
    gate = gate_type(settings, lambda name: metrics)
    return RequestController(picker, registry, clock=lambda: 0.0, flow=gate), gate
