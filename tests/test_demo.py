"""``mmgate demo`` (``make run``): the printed curl commands work as pasted, and Ctrl-C stops it."""

from __future__ import annotations

import asyncio
import signal

import pytest

from support.processes import mmgate_command, subprocess_env

pytestmark = pytest.mark.slow


async def paste(command: str) -> str:
    proc = await asyncio.create_subprocess_shell(
        command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, err
    return out.decode()


def header(response: str, name: str) -> str:
    for line in response.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == name:
            return value.strip()
    raise AssertionError(f"no {name} header in {response[:300]!r}")


async def test_demo_prints_working_curls_and_stops_on_ctrl_c() -> None:
    proc = await asyncio.create_subprocess_exec(
        *mmgate_command("demo", "--port", "0", "--time-scale", "0.02"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=subprocess_env(),
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        while not lines or "Ctrl-C" not in lines[-1]:
            raw = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
            assert raw, f"demo exited early: {lines}"
            lines.append(raw.decode())
        curls = [line.strip() for line in lines if line.strip().startswith("curl ")]
        assert len(curls) == 3
        first = await paste(curls[0])
        again = await paste(curls[1])
        assert first.startswith("HTTP/1.1 200") and again.startswith("HTTP/1.1 200")
        assert header(first, "x-mmgate-endpoint") == header(again, "x-mmgate-endpoint")
        assert int(header(first, "x-mmgate-request-tokens")) > 200  # a 640x480 image is priced as such
        streamed = await paste(curls[2])
        events = [line for line in streamed.splitlines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and '"usage"' in events[-2]
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), timeout=15) == 0
        rest = (await proc.stdout.read()).decode()
        assert "stopped" in rest
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
