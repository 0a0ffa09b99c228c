"""Fuzzing the HTTP endpoints: hypothesis-generated JSON documents and headers, and byte-level
mutations of valid requests. Whatever arrives, the gateway answers: a 2xx when the request is
valid after all, else a 4xx in the OpenAI error shape; never a 5xx, never a hang."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import random
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.probes import config
from support.stack import png, stack

MODEL = "test"
PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/messages")


class Gateway:
    """A fleet and a gateway running on their own event loop in a thread, for sync fuzz tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready: Future[tuple[str, int]] = Future()
        self.stop = asyncio.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        try:
            async with stack(config(limits={"maxBodyBytes": 1 << 20}, bodyTimeoutS=5.0), pods=2) as s:
                self.ready.set_result((s.running.host, s.running.port))
                await self.stop.wait()
        except BaseException as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            raise

    def __enter__(self) -> tuple[str, int]:
        self.thread.start()
        return self.ready.result(timeout=30)

    def __exit__(self, *_exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, int]]:
    with Gateway() as address:
        yield address


def post(
    address: tuple[str, int], path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, bytes, bool]:
    """Status, body, and whether a pod answered (else the gateway refused it itself)."""
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.getheader("x-mmgate-endpoint") is not None
    finally:
        conn.close()


def check(status: int, body: bytes, from_pod: bool) -> None:
    """Served, or refused as the client's mistake in the OpenAI shape: never a gateway failure.
    (A pod's own answer passes through as it came: the simulator has no /v1/messages, say.)"""
    assert status < 500, (status, body[:300])
    if status >= 400 and not from_pod:
        error = orjson.loads(body)["error"]
        assert set(error) == {"message", "type", "param", "code"}, error


json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)
part_types = st.sampled_from(["text", "image_url", "input_audio", "video_url", "image", "file", "hologram"])
parts = st.fixed_dictionaries(
    {"type": part_types},
    optional={
        "text": json_values,
        "image_url": st.fixed_dictionaries({"url": st.text(max_size=60) | json_values}) | json_values,
        "input_audio": st.fixed_dictionaries({"data": st.text(max_size=40), "format": st.text(max_size=5)}),
        "uuid": json_values,
    },
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "tool", "x"]) | json_values},
        optional={"content": st.text(max_size=50) | st.lists(parts, max_size=4) | json_values},
    ),
    max_size=4,
)
requests = st.fixed_dictionaries(
    {"model": st.just(MODEL) | json_values},
    optional={
        "messages": messages | json_values,
        "prompt": st.text(max_size=40) | st.lists(st.integers(), max_size=8) | json_values,
        "max_tokens": st.integers(-5, 4) | json_values,
        "stream": st.booleans() | json_values,
        "stream_options": json_values,
        "n": json_values,
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=requests, path=st.sampled_from(PATHS))
def test_generated_requests_are_served_or_refused_cleanly(
    gateway: tuple[str, int], doc: dict[str, Any], path: str
) -> None:
    if isinstance(doc.get("max_tokens"), int) and doc["max_tokens"] > 0:
        doc["max_tokens"] = min(doc["max_tokens"], 4)
    check(*post(gateway, path, json.dumps(doc).encode()))  # stdlib: big integers too


header_names = st.sampled_from(
    ["x-gateway-destination-endpoint", "x-prefiller-host-port", "x-encoder-hosts-ports", "x-mmgate-debug",
     "x-request-id", "x-llm-d-video-resolution", "Authorization", "Accept-Encoding", "Content-Encoding",
     "Expect", "x-session-id", "Content-Type"]
)  # fmt: skip
header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(headers=st.dictionaries(header_names, header_values, max_size=4))
def test_generated_headers_never_break_the_gateway(gateway: tuple[str, int], headers: dict[str, str]) -> None:
    if headers.get("Expect", "").lower() == "100-continue":
        headers.pop("Expect")  # http.client does not implement the 100-continue handshake
    body = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    check(*post(gateway, "/v1/chat/completions", body, headers))


def seeds() -> list[bytes]:
    image = "data:image/png;base64," + base64.b64encode(png(5, (40, 30))).decode()
    return [
        orjson.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 2}
        ),
        orjson.dumps(
            {
                "model": MODEL,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "what?"},
                            {"type": "image_url", "image_url": {"url": image}},
                        ],
                    }
                ],
                "max_tokens": 2,
                "stream": True,
            }
        ),
        orjson.dumps({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2}),
    ]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to four random edits: flip, delete, insert, duplicate, truncate, splice a token."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not out:
            break
        i = rng.randrange(len(out))
        op = rng.randrange(7)
        if op == 0:
            out[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            del out[i : i + rng.randint(1, 16)]
        elif op == 2:
            out[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 3:
            j = rng.randrange(len(out))
            out[i:i] = out[min(i, j) : max(i, j)][:4096]
        elif op == 4:
            del out[i:]
        elif op == 5:
            out[i:i] = rng.choice(
                [b"{", b"}", b"[", b"]", b'"', b"\\", b",", b":", b"\\u0000", b"\xff", b"1e999"]
            )
        else:
            out[i:i] = rng.choice(
                [b'"image_url"', b'"data:image/png;base64,', b"null", b"-1", b'"stream":true']
            )
    return bytes(out)


def test_mutated_valid_requests_are_served_or_refused_cleanly(gateway: tuple[str, int]) -> None:
    rng = random.Random(8)
    bodies = seeds()
    for k in range(300):
        body = mutate(rng, rng.choice(bodies))
        status, answer, from_pod = post(gateway, rng.choice(PATHS[:2]), body)
        try:
            check(status, answer, from_pod)
        except AssertionError as exc:
            raise AssertionError(f"mutation {k}: {body[:200]!r}") from exc
    conn = http.client.HTTPConnection(*gateway, timeout=5)
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200
