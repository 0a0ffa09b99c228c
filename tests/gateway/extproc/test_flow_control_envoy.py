"""Flow control behind a real Envoy (mmgate as the ext_proc endpoint picker): a held request is
released to Envoy's route the moment the pod has room, in priority order, and a sheddable one is
refused with 429 while a critical one waits and is served."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from mmgate.control.flow import FlowDispatcher
from support.envoy import EnvoyStack, envoy_stack
from support.flow import flow_config
from support.stack import chat_body
from support.waiting import until

pytestmark = pytest.mark.slow


def dispatcher(stack: EnvoyStack) -> FlowDispatcher:
    flow = stack.running.gateway.controller.flow
    assert flow is not None
    return flow.dispatcher


async def post(stack: EnvoyStack, text: str, objective: str) -> tuple[int, dict[str, str], bytes]:
    headers = {"x-gateway-inference-objective": objective, "x-gateway-inference-fairness-id": text}
    body = chat_body(stack.model, text)
    async with stack.session.post(stack.url + "/v1/chat/completions", data=body, headers=headers) as resp:
        return resp.status, {k.lower(): v for k, v in resp.headers.items()}, await resp.read()


async def test_through_envoy_held_requests_go_by_priority_and_sheddable_ones_are_refused() -> None:
    async with envoy_stack(flow_config(), pods=1, time_scale=40.0) as stack:
        d = dispatcher(stack)
        pod = stack.fleet.urls[0].removeprefix("http://")
        done: list[str] = []

        async def send(name: str, objective: str) -> int:
            status, _, _ = await post(stack, name, objective)
            done.append(name)
            return status

        blocker = asyncio.create_task(send("blocker", "standard"))
        await until(lambda: (load := d.loads.get(pod)) is not None and load.requests == 1, "the pod taken")
        standard = asyncio.create_task(send("standard", "standard"))
        await until(lambda: d.count == 1, "one held")
        critical = asyncio.create_task(send("critical", "critical"))
        await until(lambda: d.count == 2, "two held")
        status, headers, data = await post(stack, "batch", "batch")
        assert status == 429 and headers["retry-after"] == "1"
        assert orjson.loads(data)["error"]["code"] == "flow_control_shed"
        assert await asyncio.gather(blocker, standard, critical) == [200, 200, 200]
        assert done == ["blocker", "critical", "standard"]
        assert (d.count, d.bytes) == (0, 0)
