"""``mmgate serve`` as a user runs it: a real subprocess, real sockets, JSON logs, Ctrl-C."""

from __future__ import annotations

import asyncio
import base64
import signal
import subprocess
from pathlib import Path

import aiohttp
import orjson
from gw_support import Upstream

from conftest import mmgate_command, subprocess_env

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
    assert "prot" in out.stderr


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
