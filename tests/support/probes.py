"""Looking at a running gateway from outside: OpenAI error-shape checks, a config for the
end-to-end stack (:mod:`support.stack`), raw-socket clients for what aiohttp's client will not
send, and the pod counters that prove whether a request reached an engine."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson

from support.stack import ROUND_ROBIN, Stack

# Every request a pod admitted ends in one of these (stop, length, abort): their sum over the
# fleet is the number of requests that reached an engine.
POD_REQUESTS = "vllm:request_success_total"


def config(**mmgate: Any) -> str:
    """The round-robin picker config with an ``mmgate:`` section holding ``mmgate``."""
    if not mmgate:
        return ROUND_ROBIN
    return (
        ROUND_ROBIN + "mmgate:\n" + "".join(f"  {k}: {orjson.dumps(v).decode()}\n" for k, v in mmgate.items())
    )


def assert_openai_error(status: int, body: bytes, expected: int | tuple[int, ...]) -> dict[str, Any]:
    """``body`` is ``{"error": {message, type, param, code}}`` and ``status`` is as expected."""
    wanted = (expected,) if isinstance(expected, int) else expected
    assert status in wanted, (status, body[:300])
    doc = orjson.loads(body)
    error = doc["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    return dict(error)


async def pod_metric(s: Stack, pod_url: str, name: str, **labels: str) -> float:
    """A pod's own metric, summed over the label sets that carry ``labels``."""
    async with s.session.get(pod_url + "/metrics") as resp:
        text = await resp.text()
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            series, _, value = line.rpartition(" ")
            if all(w in series for w in wanted):
                total += float(value)
    return total


async def pod_work(s: Stack) -> float:
    """Requests the fleet's engines have taken in (finished or aborted) so far."""
    return await s.fleet_counter(POD_REQUESTS)


async def raw_request(
    host: str,
    port: int,
    head: bytes,
    body_parts: tuple[bytes, ...] = (),
    *,
    pause: float = 0.0,
    timeout: float = 10.0,
) -> tuple[int, bytes, float]:
    """Send ``head`` (which should say ``Connection: close``) then ``body_parts``, ``pause`` seconds
    apart, on a raw socket; read to EOF. Returns the status (0 when the gateway closed without an
    answer), the response body and the seconds it took."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)

    async def send() -> None:
        writer.write(head)
        for part in body_parts:
            if pause:
                await asyncio.sleep(pause)
            if writer.is_closing():
                return
            writer.write(part)
            with contextlib.suppress(ConnectionError):
                await writer.drain()

    sender = asyncio.create_task(send())
    data = b""
    try:
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(timeout):
                while not _complete(data) and (chunk := await reader.read(1 << 16)):
                    data += chunk
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await sender
        writer.close()
    elapsed = time.monotonic() - started
    if not data.startswith(b"HTTP/1."):
        return 0, data, elapsed
    head_end = data.find(b"\r\n\r\n")
    status = int(data.split(b" ", 2)[1])
    return status, data[head_end + 4 :] if head_end >= 0 else b"", elapsed


def _complete(data: bytes) -> bool:
    """A whole response with a Content-Length is in ``data`` (the server may linger after it)."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return False
    for line in data[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(data) - end - 4 >= int(value)
    return False
