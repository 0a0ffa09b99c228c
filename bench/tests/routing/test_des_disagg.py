"""The discrete-event benchmark's transport charges the encode pod of an E/PD config as the real
gateway over HTTP does (tests/gateway/test_e2e_disagg_load.py asserts the same record of the
gateway): the same config and requests, on a virtual clock."""

from __future__ import annotations

from pathlib import Path

from mmgate_bench.routing.des import DesOptions, Simulation
from mmgate_bench.routing.records import Ladder
from mmgate_bench.routing.systems import System
from mmgate_bench.workloads.synthetic import RawItem
from support.inflight_probe import EXPECTED, REGISTRY, ROLES, config_text, probe_of, requests


def test_des_charges_the_encode_pod_like_the_http_gateway(tmp_path: Path) -> None:
    path = tmp_path / "e-pd.yaml"
    path.write_text(config_text())
    options = DesOptions(pods=2, roles=ROLES, profile="fast")
    sim = Simulation(System("e-pd", config=path), options, registry=REGISTRY)
    replay = [RawItem(f"r{i}", body, 8) for i, body in enumerate(requests("m"))]
    items = iter(replay)
    ladder = Ladder(rates=(0.5,), duration_s=8.0)  # one request every 2 s: each ends before the next
    rung = sim.run_rung(lambda: next(items), 0.5, 8.0, ladder, 0)
    assert [r.error for r in rung.records] == [None] * 4
    assert probe_of(sim.scheduler.plugins).at_first_token == EXPECTED["gateway"]
    assert [s.inflight.requests for s in sim.picker.states.values()] == [0, 0]  # released at each end
