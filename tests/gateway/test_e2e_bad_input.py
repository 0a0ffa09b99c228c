"""Bad input is refused cleanly: every hostile body gets a 4xx in the OpenAI error shape, fast,
nothing of it reaches a pod, and well-behaved clients keep being served during the attack."""

from __future__ import annotations

import asyncio
import base64
import struct
import time
import zlib
from urllib.parse import urlsplit

import orjson

from support.probes import assert_openai_error, config, pod_work, raw_request
from support.stack import Stack, chat_body, data_url, png, stack

LIMIT = 1 << 20  # 1 MiB bodies for these tests


def png_claiming(width: int, height: int) -> bytes:
    """A PNG signature and IHDR that claim ``width`` x ``height`` pixels, and nothing else."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk + b"\0" * 32


def image_body(model: str, url: str) -> bytes:
    part = {"type": "image_url", "image_url": {"url": url}}
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": [part]}], "max_tokens": 2})


def hostile_bodies(model: str) -> dict[str, tuple[bytes, int]]:
    """name → (body, expected status)."""
    tiny = data_url(png(3, (8, 8)))
    user = {"role": "user", "content": "hi"}
    return {
        "malformed JSON": (b'{"model": "x", "messages": [', 400),
        "not an object": (b"[1, 2, 3]", 400),
        "JSON null": (b"null", 400),
        "empty body": (b"", 400),
        "deeply nested arrays": (b'{"model":"x","messages":' + b"[" * 50_000 + b"]" * 50_000 + b"}", 400),
        "deeply nested objects": (b'{"a":' * 20_000 + b"1" + b"}" * 20_000, 400),
        "huge string in a typed field": (
            orjson.dumps({"model": model, "messages": [user], "max_tokens": "9" * 500_000}),
            400,
        ),
        "invalid UTF-8": (
            b'{"model":"' + model.encode() + b'","messages":[{"role":"user","content":"\xff\xfe"}]}',
            400,
        ),
        "lone surrogate escape": (
            b'{"model":"' + model.encode() + b'","messages":[{"role":"user","content":"\\ud800"}]}',
            (200, 400),  # type: ignore[dict-item]
        ),
        "invalid base64": (image_body(model, "data:image/png;base64,iVBO!!!!"), 400),
        "HTML posing as an image": (
            image_body(model, "data:text/html;base64," + base64.b64encode(b"<script>x</script>").decode()),
            400,
        ),
        "PNG header claiming 100000x100000": (
            image_body(
                model, "data:image/png;base64," + base64.b64encode(png_claiming(100_000, 100_000)).decode()
            ),
            400,
        ),
        "thousands of image parts": (
            orjson.dumps(
                {
                    "model": model,
                    "messages": [
                        {
                            "role": "user",
                            "content": [{"type": "image_url", "image_url": {"url": tiny}}] * 3000,
                        }
                    ],
                }
            ),
            400,
        ),
        "unknown part type": (
            orjson.dumps({"model": model, "messages": [{"role": "user", "content": [{"type": "hologram"}]}]}),
            400,
        ),
        "file: URL": (image_body(model, "file:///etc/passwd"), 400),
        "unknown model": (chat_body("no-such-model", "hi"), 404),
        "form-encoded body": (b"model=x&messages=hi", 400),
    }


async def send(s: Stack, body: bytes, **headers: str) -> tuple[int, bytes, float]:
    started = time.monotonic()
    async with s.session.post(s.url + "/v1/chat/completions", data=body, headers=headers) as resp:
        data = await resp.read()
        return resp.status, data, time.monotonic() - started


async def test_hostile_bodies_get_fast_openai_shaped_4xx_and_never_reach_a_pod() -> None:
    async with stack(config(limits={"maxBodyBytes": LIMIT}), pods=2) as s:
        before = await pod_work(s)
        for name, (body, expected) in hostile_bodies(s.model).items():
            status, data, _ = await send(s, body, **{"Content-Type": "application/json"})
            if status == 200:  # only cases that allow it (a lone surrogate is valid JSON text)
                assert expected == (200, 400), name
                continue
            error = assert_openai_error(status, data, expected)  # a 4xx of its own, never the 408 of a wait
            assert "Traceback" not in error["message"], name
        # Nothing refused reached an engine (the surrogate case, if served, is the only work).
        served_ok = await pod_work(s) - before
        assert served_ok <= 1
        metrics = await (await s.session.get(s.url + "/metrics")).text()
        assert 'status="500"' not in metrics


async def test_a_body_over_the_limit_is_a_413_before_it_is_read() -> None:
    async with stack(config(limits={"maxBodyBytes": LIMIT}), pods=1) as s:
        before = await pod_work(s)
        big = chat_body(s.model, "x" * (LIMIT + 10))
        status, data, _ = await send(s, big)
        assert_openai_error(status, data, 413)

        # Declared small, sent big (chunked, no Content-Length): cut off at the limit all the same.
        async def chunks() -> object:
            for _ in range(3):
                yield b"x" * (LIMIT // 2)

        async with s.session.post(s.url + "/v1/chat/completions", data=chunks()) as resp:
            assert_openai_error(resp.status, await resp.read(), 413)
        # A head that declares 10 GB is refused from the head alone.
        u = urlsplit(s.url)
        head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 10000000000\r\nConnection: close\r\n\r\n"
        )
        status, data, _ = await raw_request(u.hostname or "", u.port or 0, head, (b"{",))
        assert_openai_error(status, data, 413)  # not the 408 of waiting for the body
        assert await pod_work(s) == before


async def test_a_slow_loris_body_is_cut_off_with_a_408_while_others_are_served() -> None:
    async with stack(config(bodyTimeoutS=3.0), pods=1) as s:
        u = urlsplit(s.url)
        body = chat_body(s.model, "hello")
        head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        )
        # One byte every 0.1 s: the body would take minutes to arrive.
        lorises = [
            asyncio.create_task(
                raw_request(
                    u.hostname or "",
                    u.port or 0,
                    head,
                    tuple(body[i : i + 1] for i in range(len(body))),
                    pause=0.1,
                )
            )
            for _ in range(20)
        ]
        await asyncio.sleep(0.2)
        served = await asyncio.gather(*(send(s, chat_body(s.model, f"meanwhile {k}")) for k in range(5)))
        assert all(status == 200 for status, _, _ in served), served
        assert not any(loris.done() for loris in lorises)  # served while every loris still held on
        for status, data, took in await asyncio.gather(*lorises):
            assert_openai_error(status, data, 408)
            assert took > 2.9


async def test_header_injection_and_routing_headers_do_not_reach_upstream() -> None:
    async with stack(config(), pods=1) as s:
        u = urlsplit(s.url)
        body = chat_body(s.model, "hi")
        # A CR/LF smuggled into a header value, and a second Content-Length: refused by the parser.
        for bad_head in (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Evil: a\rInjected: b\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body),
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
            b"Content-Length: 5\r\nConnection: close\r\n\r\n" % len(body),
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body),
        ):
            status, _, _ = await raw_request(u.hostname or "", u.port or 0, bad_head, (body,))
            assert status in (0, 400), status  # refused from the head: not a 408 after a wait
        # A response-splitting attempt through x-request-id is replaced, not echoed.
        async with s.session.post(
            s.url + "/v1/chat/completions", data=body, headers={"x-request-id": "abc def<script>"}
        ) as resp:
            assert resp.status == 200
            assert resp.headers["x-request-id"] != "abc def<script>"
            assert len(resp.headers["x-request-id"]) == 32
