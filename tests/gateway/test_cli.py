"""``mmgate serve`` as a user runs it: a real subprocess, real sockets, JSON logs, Ctrl-C."""

from __future__ import annotations

import asyncio
import base64
import signal
import subprocess
from pathlib import Path

import aiohttp
import orjson

from support.configs import THREE_MISTAKES
from support.processes import REPO, mmgate_command, subprocess_env
from support.upstreams import Upstream

IMAGE = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()


def test_serve_without_endpoints_is_a_clear_error() -> None:
    out = subprocess.run(mmgate_command("serve"), capture_output=True, text=True, env=subprocess_env())
    assert out.returncode == 2
    assert "no endpoints" in out.stderr and "--endpoints" in out.stderr


def test_serve_rejects_a_misspelled_config_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nmmgate:\n  prot: 8080\n")
    out = subprocess.run(
        mmgate_command("serve", "--config", str(config)), capture_output=True, text=True, env=subprocess_env()
    )
    assert out.returncode == 2
    assert f"mmgate serve: {config}:4: mmgate.prot: unknown key 'prot' (did you mean 'port'?)" in out.stderr


def test_serve_names_the_file_and_line_of_each_plugin_mistake(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("plugins:\n- type: queue-scorer\n- type: token-load-scorr\n  parameters: {x: 1}\n")
    out = subprocess.run(
        mmgate_command("serve", "--config", str(config), "--endpoints", "127.0.0.1:1"),
        capture_output=True,
        text=True,
        env=subprocess_env(),
    )
    assert out.returncode == 2
    assert out.stderr.startswith(f"mmgate serve: {config}:3: plugins[1].type: unknown plugin type")
    assert "Traceback" not in out.stderr


def test_serve_reports_every_mistake_in_file_order_and_the_check_command(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(THREE_MISTAKES)
    out = subprocess.run(
        mmgate_command("serve", "--config", str(config)), capture_output=True, text=True, env=subprocess_env()
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert [line.split(": ", 2)[1] for line in lines[:3]] == [f"{config}:6", f"{config}:12", f"{config}:14"]
    assert "afinityThreshold" in lines[0] and "token-load-scorr" in lines[1] and "99999" in lines[2]
    assert lines[3:] == [
        f"mmgate serve: 3 mistakes; `mmgate check {config}` lists a config's mistakes (or the scheduler "
        "it becomes) without starting the gateway"
    ]


async def test_serve_proxies_logs_json_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    upstream = Upstream(model="m")
    await upstream.start()
    config = tmp_path / "gw.yaml"
    # Flags override the file: the file's port and endpoint are replaced.
    config.write_text(
        "apiVersion: llm-d.ai/v1\nkind: EndpointPickerConfig\n"
        "mmgate:\n  port: 1\n  endpoints: ['127.0.0.1:1']\n"
    )
    proc = await asyncio.create_subprocess_exec(
        *mmgate_command("serve", "--config", str(config), "--endpoints", upstream.address, "--port", "0"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=subprocess_env(),
    )
    assert proc.stderr is not None
    logs: list[dict[str, object]] = []
    try:
        while True:
            line = await asyncio.wait_for(proc.stderr.readline(), timeout=20)
            assert line, "gateway exited before listening"
            logs.append(orjson.loads(line))
            if logs[-1]["msg"] == "listening":
                break
        url = str(logs[-1]["url"])
        body = {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMAGE}"}},
                    ],
                }
            ],
        }
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": "Bearer sk-secret-key", "x-request-id": "cli-test-1"}
            async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as resp:
                assert resp.status == 200
                assert resp.headers["x-mmgate-endpoint"] == upstream.address
                assert int(resp.headers["x-mmgate-request-tokens"]) > 0
        while True:
            line = await asyncio.wait_for(proc.stderr.readline(), timeout=10)
            record = orjson.loads(line)
            if record["msg"] == "request":
                break
        assert record["request_id"] == "cli-test-1"
        assert record["status"] == "200" and record["endpoint"] == upstream.address
        assert record["media"] == {"image": 1}
        assert "sk-secret" not in line.decode() and IMAGE[:40] not in line.decode()
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), timeout=15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await upstream.stop()


def test_flags_are_applied_to_the_config_before_the_gateway_is_built(tmp_path: Path) -> None:
    import argparse

    from mmgate.gateway.app import build_gateway
    from mmgate.gateway.cli import add_arguments, load

    config = tmp_path / "gw.yaml"
    config.write_text("mmgate:\n  port: 1\n  adminPort: 2\n  admission: {maxInflight: 5, maxQueue: 3}\n")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = ["--config", str(config), "--port", "0", "--admin-port", "0", "--max-inflight", "-4"]
    section = load(parser.parse_args([*flags, "--no-access-log", "--endpoints", "127.0.0.1:9,"])).mmgate
    assert (section.port, section.adminPort, section.accessLog) == (0, 0, False)
    assert (section.admission.maxInflight, section.admission.maxQueue) == (0, 3)  # a negative N is no limit
    assert section.endpoints == ["127.0.0.1:9"]
    settings = build_gateway(load(parser.parse_args(flags))).settings  # what every worker builds
    limit = settings.control.max_inflight
    assert (settings.port, settings.admin_port, limit, settings.access_log) == (0, 0, 0, True)


def test_help_examples_load_and_its_routes_are_the_route_table() -> None:
    """Every example of ``mmgate serve --help`` (bar the one naming your own files) loads into a
    gateway with endpoints, and the help names every route the gateway serves."""
    import argparse
    import shlex

    from mmgate.gateway.app import build_gateway
    from mmgate.gateway.cli import add_arguments, load
    from mmgate.gateway.server import route_list

    out = subprocess.run(
        mmgate_command("serve", "--help"), capture_output=True, text=True, env=subprocess_env(), cwd=REPO
    )
    assert out.returncode == 0
    examples = [
        line.split(None, 2)[2] for line in out.stdout.splitlines() if line.startswith("  mmgate serve ")
    ]
    assert len(examples) == 3
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for example in examples:
        if "my.yaml" in example:
            continue
        args = parser.parse_args(shlex.split(example.replace("examples/", f"{REPO}/examples/")))
        config = load(args)
        assert config.mmgate.endpoints, example  # `mmgate serve` refuses a config without them
        gateway = build_gateway(config)
        assert {path for _, path in route_list()} == set(gateway.routes())
    help_text = " ".join(out.stdout.split())
    for _method, path in route_list():
        assert f" {path}," in help_text or f" {path}." in help_text or f" {path};" in help_text, path
