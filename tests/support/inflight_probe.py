"""A probe of in-flight load for an E/PD config: the same requests, sent through the gateway over
HTTP (tests/gateway/test_e2e_disagg_load.py) or through the discrete-event benchmark
(bench/tests/routing/test_des_disagg.py), must leave the same record -- one controller behind
every transport."""

from __future__ import annotations

from collections.abc import Mapping

import yaml

from mmgate.scheduling import EndpointState, RequestLifecycle, SchedulingRequest
from mmgate.scheduling.contracts import NoParams, Plugin, PluginHandle
from mmgate.scheduling.registry import builtin_registry
from support.processes import REPO
from support.stack import chat_body, png

EXAMPLE = REPO / "examples" / "e-pd.yaml"
ROLES = ("encode", "prefill-decode")
Snapshot = list[tuple[str, str | None, int]]


class LoadProbe(Plugin[NoParams], RequestLifecycle):
    """Per request, at its first token: (profile, role, in-flight requests) of each pod it holds;
    at each stage pod's release: that pod and every held pod's (name, in-flight requests)."""

    type_name = "test-load-probe"

    def __init__(self, name: str, params: NoParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self.held: dict[str, list[tuple[str, EndpointState]]] = {}
        self.at_first_token: list[Snapshot] = []
        self.at_stage_done: list[tuple[str, list[tuple[str, int]]]] = []

    def on_started(
        self, request: SchedulingRequest, endpoint: EndpointState, profile: str, now: float
    ) -> None:
        self.held.setdefault(request.request_id, []).append((profile, endpoint))

    def on_stage_done(self, request: SchedulingRequest, endpoint: EndpointState, now: float) -> None:
        held = self.held.get(request.request_id, [])
        self.at_stage_done.append((endpoint.name, sorted((e.name, e.inflight.requests) for _, e in held)))

    def on_first_token(self, request: SchedulingRequest, now: float) -> None:
        held = self.held.get(request.request_id, [])
        self.at_first_token.append(sorted((p, e.effective_role, e.inflight.requests) for p, e in held))

    def on_finished(self, request: SchedulingRequest, now: float) -> None:
        self.held.pop(request.request_id, None)


REGISTRY = builtin_registry().with_plugins(LoadProbe)


def config_text() -> str:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["plugins"].append({"type": "test-load-probe"})
    return yaml.safe_dump(doc)


def requests(model: str) -> list[bytes]:
    cat, dog = png(1, (256, 192)), png(2, (192, 256))
    texts = [("what is this?", [cat]), ("say hello", []), ("and this?", [dog]), ("again?", [cat])]
    return [chat_body(model, text, images, max_tokens=8, stream=True) for text, images in texts]


EXPECTED: dict[str, list[Snapshot]] = {
    "gateway": [  # the encode pod was released when its leg ended
        [("decode", "prefill-decode", 1), ("encode", "encode", 0)],
        [("decode", "prefill-decode", 1)],  # text only: no encode stage, no encode load
        [("decode", "prefill-decode", 1), ("encode", "encode", 0)],
        [("decode", "prefill-decode", 1), ("encode", "encode", 0)],
    ],
    "sidecar": [  # the legs are out of the gateway's sight: held until the first token
        [("decode", "prefill-decode", 1), ("encode", "encode", 1)],
        [("decode", "prefill-decode", 1)],
        [("decode", "prefill-decode", 1), ("encode", "encode", 1)],
        [("decode", "prefill-decode", 1), ("encode", "encode", 1)],
    ],
}


def probe_of(plugins: Mapping[str, object]) -> LoadProbe:
    probe = plugins["test-load-probe"]
    assert isinstance(probe, LoadProbe)
    return probe
