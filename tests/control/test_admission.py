"""Overload is shed, not queued forever: a bounded in-flight limit, a bounded FIFO queue behind
it, per-client limits, 429 + Retry-After beyond; and memory stays bounded with many idle streams."""

from __future__ import annotations

import asyncio
import time

import pytest

from mmgate.control.admission import Admission, AdmissionSettings, Overloaded, client_key
from support.probes import assert_openai_error, config
from support.stack import chat_body, stack


async def test_admission_slots_queue_fifo_timeout_and_per_client() -> None:
    adm = Admission(AdmissionSettings(max_queue=2, queue_timeout_s=0.3, per_client_inflight=3))
    await adm.enter(2, "a")
    await adm.enter(2, "b")
    order: list[str] = []

    async def queued(client: str) -> None:
        await adm.enter(2, client)
        order.append(client)

    waiters = [asyncio.create_task(queued("c")), asyncio.create_task(queued("d"))]
    await asyncio.sleep(0.01)
    assert adm.queued == 2
    with pytest.raises(Overloaded, match="in flight and 2 queued"):
        await adm.enter(2, "e")  # queue full: refused at once
    adm.leave("a")
    adm.leave("b")
    await asyncio.gather(*waiters)
    assert order == ["c", "d"] and adm.inflight == 2  # FIFO, slots handed over
    started = time.monotonic()
    with pytest.raises(Overloaded, match="no slot freed up"):
        await adm.enter(2, "f")  # waits its queue_timeout_s, then 429
    assert time.monotonic() - started > 0.25  # it waited, and the message says what for
    assert adm.queued == 0
    adm.leave("c")
    adm.leave("d")
    assert adm.inflight == 0
    for _ in range(3):
        await adm.enter(0, "greedy")
    with pytest.raises(Overloaded, match="this client already has 3"):
        await adm.enter(0, "greedy")
    await adm.enter(0, "polite")  # others are not affected


async def test_a_cancelled_waiter_gives_its_place_back() -> None:
    adm = Admission(AdmissionSettings(max_queue=1, queue_timeout_s=5))
    await adm.enter(1, "a")
    waiter = asyncio.create_task(adm.enter(1, "b"))
    await asyncio.sleep(0.01)
    waiter.cancel()  # the client went away while queued
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert adm.queued == 0
    adm.leave("a")
    assert adm.inflight == 0


def test_client_keys_hide_the_api_key() -> None:
    key = client_key({"Authorization": "Bearer sk-secret"}, "10.0.0.1")
    assert "sk-secret" not in key and key.startswith("key:")
    assert client_key({}, "10.0.0.1") == "addr:10.0.0.1"


async def test_beyond_inflight_and_queue_clients_get_429_with_retry_after_and_nothing_is_lost() -> None:
    admission = {"maxInflight": 3, "maxQueue": 3, "queueTimeoutS": 5.0}
    async with stack(config(admission=admission), pods=1, time_scale=3.0) as s:
        statuses: list[tuple[int, str, bytes]] = []

        async def one(k: int) -> None:
            body = chat_body(s.model, f"burst {k}", max_tokens=8)
            async with s.session.post(s.url + "/v1/chat/completions", data=body) as resp:
                statuses.append((resp.status, resp.headers.get("Retry-After", ""), await resp.read()))

        await asyncio.gather(*(one(k) for k in range(12)))
        ok = [x for x in statuses if x[0] == 200]
        shed = [x for x in statuses if x[0] == 429]
        assert len(ok) + len(shed) == 12  # every request got an answer
        assert len(ok) >= 6 and len(shed) >= 3  # 3 in flight + 3 queued served; the rest shed at once
        for status, retry_after, body in shed:
            error = assert_openai_error(status, body, 429)
            assert error["code"] == "overloaded" and retry_after == "1"
            # refused at once for a full queue, not after waiting out queueTimeoutS in it
            assert "in flight and 3 queued" in error["message"], error
        assert s.running.gateway.inflight == 0
