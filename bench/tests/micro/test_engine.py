"""The engine throughput probe runs end to end and reports what it measured."""

from __future__ import annotations

import json
from pathlib import Path

from mmgate_bench.cli import main as bench
from mmgate_bench.micro import engine


def test_probe_serves_every_request_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    assert (
        bench(
            [
                "engine",
                "--pods",
                "2",
                "--requests",
                "40",
                "--rate",
                "4",
                "--output-tokens",
                "20",
                "--hash-algo",
                "builtin",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["requests"] == 40 and result["steps"] > 20
    assert 0 < result["mean_ttft"] < 2.0  # 4 req/s on two H200 pods: no queueing to speak of
    assert result["requests_per_cpu_minute"] > 0


def test_more_load_means_longer_ttft() -> None:
    light = engine.simulate(pods=1, requests=60, rate=1, output_tokens=20, hash_algo="builtin")
    heavy = engine.simulate(pods=1, requests=60, rate=20, output_tokens=20, hash_algo="builtin")
    assert heavy.mean_ttft > 2 * light.mean_ttft
