"""``mmgate sim`` as a user runs it, and fleet files."""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from mmgate.sim.cli import add_arguments, specs_from_args
from mmgate.sim.fleet import SimFleet
from mmgate.sim.roles import Role
from mmgate.sim.server import SimPod
from mmgate.sim.spec import load_fleet
from support.processes import mmgate_command, subprocess_env
from support.tokenizer_dir import model_dir

FLEET = """
base_port: 9100
defaults:
  profile: fast
  kv_events: {enable_kv_cache_events: true, endpoint: "tcp://*:5557", replay_endpoint: "tcp://*:5657"}
pods:
  - {name: enc, role: encode}
  - {name: pd, count: 3, engine: {encoder_cache_tokens: 0}, time_scale: 0.5}
"""


def test_help_explains_the_flags() -> None:
    out = subprocess.run(
        mmgate_command("sim", "--help"), capture_output=True, text=True, env=subprocess_env()
    )
    assert out.returncode == 0
    for flag in ("--profile", "--pods", "--base-port", "--fleet", "--time-scale", "--kv-events-config",
                 "--mm-encoder-only", "--fail-rate-503", "--stall"):  # fmt: skip
        assert flag in out.stdout


def test_sim_serves_until_duration_and_writes_endpoints(tmp_path: Path) -> None:
    endpoints = tmp_path / "endpoints.json"
    args = ["--profile", "fast", "--pods", "2", "--base-port", "0", "--duration", "20"]
    proc = subprocess.Popen(
        mmgate_command("sim", *args, "--endpoints-file", str(endpoints)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        deadline = time.monotonic() + 30
        while not endpoints.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pods = json.loads(endpoints.read_text())
        assert [p["name"] for p in pods] == ["pod-0", "pod-1"]
        body = json.dumps({"model": "test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        req = urllib.request.Request(
            pods[1]["url"] + "/v1/chat/completions",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.headers["x-mmgate-sim-pod"] == "pod-1"
            assert json.load(resp)["usage"]["completion_tokens"] == 2
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert pods[0]["url"] in out.replace("\n", "")


def test_unknown_profile_is_a_clear_error() -> None:
    out = subprocess.run(
        mmgate_command("sim", "--profile", "no-such-gpu", "--base-port", "0", "--duration", "1"),
        capture_output=True,
        text=True,
        env=subprocess_env(),
    )
    assert out.returncode != 0
    assert "no-such-gpu" in out.stdout + out.stderr


def test_fleet_file_groups_ports_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    specs = load_fleet(path, {"seed": 3})
    assert [s.name for s in specs] == ["enc", "pd-0", "pd-1", "pd-2"]
    assert [s.port for s in specs] == [9100, 9101, 9102, 9103]
    assert specs[0].role is Role.ENCODE and specs[1].role is Role.BOTH
    assert specs[2].engine == {"encoder_cache_tokens": 0} and specs[2].time_scale == 0.5
    assert all(s.seed == 3 for s in specs)
    # pods sharing one KV-events config get consecutive ports, like vLLM's data-parallel ranks
    offset = SimFleet(specs).specs
    assert [s.kv_events.endpoint for s in offset if s.kv_events] == [f"tcp://*:{5557 + i}" for i in range(4)]
    assert [s.kv_events.replay_endpoint for s in offset if s.kv_events] == [
        f"tcp://*:{5657 + i}" for i in range(4)
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("pods: [{name: a, colour: red}]", "colour"),
        ("pods: [{name: a}, {name: a}]", "repeated: a"),
        ("pods: [{count: 0}]", "count"),
        ("defaults: {time_scale: -1}", "time_scale"),
        ("pods: [{faults: {rate_500: 2}}]", "between 0 and 1"),
        ("defaults: {ec_transfer_s_per_token: -1}", "ec_transfer_s_per_token"),
    ],
)
def test_fleet_file_mistakes_name_the_field(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=needle):
        load_fleet(path)


def test_flags_become_pod_settings() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            "--profile",
            "fast",
            "--pods",
            "3",
            "--base-port",
            "9000",
            "--mm-encoder-only",
            "--fail-rate-429",
            "0.1",
            "--no-enable-prefix-caching",
            "--kv-events-config",
            '{"enable_kv_cache_events": true}',
        ]
    )
    specs = specs_from_args(args)
    assert [s.port for s in specs] == [9000, 9001, 9002]
    assert all(s.role is Role.ENCODE for s in specs)
    assert specs[0].faults.rate_429 == 0.1
    assert specs[0].engine == {"enable_prefix_caching": False}
    assert specs[0].kv_events is not None and specs[0].kv_events.active
    args = parser.parse_args(
        ["--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}']
    )
    assert specs_from_args(args)[0].role is Role.DECODE
    args = parser.parse_args(["--ec-transfer-time-per-token", "1e-6"])
    assert specs_from_args(args)[0].ec_transfer_s_per_token == 1e-6
    args = parser.parse_args(["--mm-encoder-tp-mode", "data", "--tensor-parallel-size", "2"])
    pod = SimPod(specs_from_args(args)[0])
    assert pod.engine.encoder_lanes == 2  # vLLM's flag names reach the engine


def test_a_bad_tensor_parallel_size_is_a_message_and_exit_2() -> None:
    out = subprocess.run(
        mmgate_command(
            "sim", "--mm-encoder-tp-mode", "data", "--tensor-parallel-size", "0", "--duration", "1"
        ),
        capture_output=True,
        text=True,
        env=subprocess_env(),
    )
    assert out.returncode == 2
    assert "--tensor-parallel-size must be at least 1" in out.stderr and "Traceback" not in out.stderr


def test_tokenizer_flag_reaches_the_pods_and_a_bad_folder_exits_2(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    folder = model_dir(tmp_path / "model")
    (spec,) = specs_from_args(parser.parse_args(["--tokenizer", str(folder), "--pods", "1"]))
    assert spec.tokenizer == str(folder)
    out = subprocess.run(
        mmgate_command("sim", "--tokenizer", str(tmp_path / "missing"), "--duration", "0"),
        capture_output=True,
        text=True,
        env=subprocess_env(),
    )
    assert out.returncode == 2
    assert "tokenizer" in out.stderr and "does not exist" in out.stderr
    assert "Traceback" not in out.stderr
