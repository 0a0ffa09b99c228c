"""What flow control costs a request that is not held: ``mmgate bench flow-overhead``.

The request controller's steps around one request (open, admit, decide, started, first byte,
finished, leave) over a picker that picks the first candidate (the scheduler is not what is
measured), for a one-image chat request parsed once, eight endpoints with fresh metrics and room.
Three controllers, in interleaved rounds so machine load falls on all alike:

- ``off``: flow control off (the default);
- ``on-fcfs``: on, ``global-strict-fairness-policy`` (classification and the saturation test);
- ``on-media-cost``: on, ``media-cost-fairness-policy`` (plus the request's cost from the tokens
  its decision priced, and the usage read from its answer as the HTTP relay reads it: a
  ~100-token JSON answer fed to a :class:`~mmgate.gateway.usage.UsageMeter`, the charge corrected).

Every controller is asked, as the relay asks, whether the request's output is charged.

Printed: the median over rounds of the mean nanoseconds per request, and each against ``off``.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from mmgate.config import parse_config
from mmgate.control import Decision, RequestController
from mmgate.control.flow import FlowGate, flow_settings_of
from mmgate.datalayer.endpoints import EndpointRecord, EndpointRegistry, parse_endpoint
from mmgate.datalayer.metrics import MetricsSnapshot
from mmgate.gateway.usage import UsageMeter
from mmgate.request import RequestView, parse_request

# No scrapes happen here, so requests sent "since the last scrape" pile up: a queue-depth threshold
# beyond any count keeps every endpoint unsaturated (what is measured is the path with room).
FLOW = """
featureGates: [flowControl]
plugins:
- type: utilization-detector
  parameters: {queueDepthThreshold: 1000000000}
flowControl:
  saturationDetector: {pluginRef: utilization-detector}
  defaultPriorityBand: {fairnessPolicyRef: %s}
"""


class FirstCandidate:
    """An endpoint picker that takes the first candidate and keeps no state."""

    def decide(
        self, view: RequestView, candidates: Sequence[EndpointRecord], now: float, *, request_id: str,
        headers: Mapping[str, str], debug: bool, tenant: str | None = None,
    ) -> Decision:  # fmt: skip
        return Decision(candidates[0].name, request_tokens=300)

    def fallbacks(self, decision: Decision) -> list[str]:
        return []

    def started(self, decision: Decision) -> None:
        pass

    def first_token(self, decision: Decision) -> None:
        pass

    def stage_done(self, decision: Decision, endpoint: str) -> None:
        pass

    def finished(self, decision: Decision, *, ok: bool) -> None:
        pass

    def forget(self, endpoint: str) -> None:
        pass


def _view() -> RequestView:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (448, 336), (30, 90, 160)).save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is this?"}]
    body = {"model": "Qwen/Qwen3-VL-32B-Instruct", "messages": [{"role": "user", "content": content}]}
    return parse_request(json.dumps(body).encode(), {})


def _controller(policy: str | None) -> RequestController:
    registry = EndpointRegistry()
    for i in range(8):
        record = registry.add(parse_endpoint(f"10.0.0.{i + 1}:8000"))
        record.metrics = MetricsSnapshot("vllm", waiting=0.0, running=1.0, kv_usage=0.1, scraped_at=0.0)
    gate = None
    if policy is not None:
        config = parse_config(yaml.safe_load(FLOW % policy))
        settings = flow_settings_of(config.picker, config.mmgate)
        assert settings is not None

        def metrics_of(name: str) -> MetricsSnapshot | None:
            record = registry.get(name)
            return record.metrics if record is not None else None

        gate = FlowGate(settings, metrics_of)
    return RequestController(FirstCandidate(), registry, clock=lambda: 0.0, flow=gate)


ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "Qwen/Qwen3-VL-32B-Instruct",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "word " * 100}}],
        "usage": {"prompt_tokens": 330, "completion_tokens": 100, "total_tokens": 430},
    }
).encode()
"""What a pod answers: read for its usage when flow control charges the output."""


def _round(controller: RequestController, view: RequestView, headers: dict[str, str], n: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(n):
        flight = controller.open(view, "r", headers)
        assert controller.admit_now(flight)
        attempt = controller.decide(flight)
        assert attempt is not None
        controller.started(attempt)
        controller.first_byte(attempt, 200)
        meter = UsageMeter.of(view) if flight.output_estimate else None  # as the relay does
        if meter is not None:
            meter.feed(ANSWER)
            if (usage := meter.usage()) is not None:
                controller.usage(attempt, usage)
        controller.finished(attempt, ok=True)
        controller.leave(flight)
    return (time.perf_counter_ns() - started) / n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", type=Path, default=Path("results/flow-overhead.json"))


def run(args: argparse.Namespace) -> int:
    view = _view()
    headers = {"x-gateway-inference-fairness-id": "tenant-a"}
    systems: dict[str, RequestController] = {
        "off": _controller(None),
        "on-fcfs": _controller("global-strict-fairness-policy"),
        "on-media-cost": _controller("media-cost-fairness-policy"),
    }
    samples: dict[str, list[float]] = {name: [] for name in systems}
    for controller in systems.values():  # warm-up
        _round(controller, view, headers, args.requests // 4)
    for _ in range(args.rounds):
        for name, controller in systems.items():
            samples[name].append(_round(controller, view, headers, args.requests))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base = medians["off"]
    report: dict[str, Any] = {
        "requests_per_round": args.requests,
        "rounds": args.rounds,
        "median_ns_per_request": {k: round(v) for k, v in medians.items()},
        "added_ns_vs_off": {k: round(v - base) for k, v in medians.items()},
        "samples_ns": {k: [round(x) for x in v] for k, v in samples.items()},
    }
    print(f"{'controller':<16} {'ns/request':>11} {'vs off':>8}")
    for name, value in medians.items():
        print(f"{name:<16} {value:>11.0f} {value / base:>7.2f}x")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0
