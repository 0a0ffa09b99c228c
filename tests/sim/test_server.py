"""A simulated pod through real HTTP on loopback: what a client and a gateway see."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mmgate.sim.fleet import SimFleet
from mmgate.sim.server import POD_HEADER
from support import bodies
from support.bodies import data_uri, image_part
from support.stack import png

PNG_URL = data_uri(png(1, (448, 448)))


@pytest.fixture
async def fleet() -> AsyncIterator[SimFleet]:
    async with SimFleet(pods=2, profile="fast", natural_output_tokens=7) as f:
        yield f


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def chat(text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": "test", "messages": [{"role": "user", "content": text}], **extra}


async def sse_events(resp: aiohttp.ClientResponse) -> list[Any]:
    events: list[Any] = []
    async for line in resp.content:
        line = line.strip()
        if line.startswith(b"data: "):
            data = line[6:]
            events.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return events


async def metrics(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """Samples by name (labels dropped, summed), parsed with prometheus_client's own parser."""
    async with http.get(url + "/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


async def test_chat_non_streaming_answers_with_usage_and_pod_header(
    fleet: SimFleet, http: aiohttp.ClientSession
) -> None:
    url = fleet.urls[1]
    async with http.post(url + "/v1/chat/completions", json=chat(max_tokens=5)) as resp:
        assert resp.status == 200
        assert resp.headers[POD_HEADER] == "pod-1"
        doc = await resp.json()
    assert doc["object"] == "chat.completion"
    assert doc["choices"][0]["finish_reason"] == "length"
    assert doc["choices"][0]["message"]["content"]
    usage = doc["usage"]
    assert usage["completion_tokens"] == 5
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}


async def test_streaming_sends_one_event_per_token_then_usage_and_done(
    fleet: SimFleet, http: aiohttp.ClientSession
) -> None:
    body = chat(max_tokens=4, stream=True, stream_options={"include_usage": True})
    async with http.post(fleet.urls[0] + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = await sse_events(resp)
    assert events[-1] == "[DONE]"
    role, *tokens, finish, usage, _done = events
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(tokens) == 4
    assert all(t["object"] == "chat.completion.chunk" and t["choices"][0]["delta"]["content"] for t in tokens)
    assert finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4
    assert len({e["id"] for e in events[:-1]}) == 1


async def test_usage_chunk_only_when_asked(fleet: SimFleet, http: aiohttp.ClientSession) -> None:
    async with http.post(
        fleet.urls[0] + "/v1/chat/completions", json=chat(max_tokens=2, stream=True)
    ) as resp:
        events = await sse_events(resp)
    assert not any("usage" in e for e in events if isinstance(e, dict))


async def test_without_ignore_eos_answers_stop_at_natural_length(
    fleet: SimFleet, http: aiohttp.ClientSession
) -> None:
    async with http.post(fleet.urls[0] + "/v1/chat/completions", json=chat(max_tokens=50)) as resp:
        doc = await resp.json()
    assert doc["usage"]["completion_tokens"] == 7
    assert doc["choices"][0]["finish_reason"] == "stop"
    async with http.post(
        fleet.urls[0] + "/v1/chat/completions", json=chat(max_tokens=50, ignore_eos=True)
    ) as resp:
        doc = await resp.json()
    assert doc["usage"]["completion_tokens"] == 50
    assert doc["choices"][0]["finish_reason"] == "length"


async def test_completions_api_streams_text_chunks(fleet: SimFleet, http: aiohttp.ClientSession) -> None:
    body = {"model": "test", "prompt": "Once upon a time", "max_tokens": 3, "stream": True}
    async with http.post(fleet.urls[0] + "/v1/completions", json=body) as resp:
        events = await sse_events(resp)
    tokens = [e for e in events[:-1] if e["choices"] and e["choices"][0]["finish_reason"] is None]
    assert len(tokens) == 3
    assert all(e["object"] == "text_completion" and e["choices"][0]["text"] for e in tokens)
    async with http.post(fleet.urls[0] + "/v1/completions", json={**body, "stream": False}) as resp:
        doc = await resp.json()
    assert doc["object"] == "text_completion" and doc["usage"]["completion_tokens"] == 3


async def test_repeated_image_prompt_hits_prefix_and_encoder_caches(
    fleet: SimFleet, http: aiohttp.ClientSession
) -> None:
    url = fleet.urls[0]
    question = "What is in the picture?"
    body = bodies.chat(image_part(PNG_URL), question, model="test", max_tokens=3, ignore_eos=True)
    headers = {"Content-Type": "application/json"}
    before = await metrics(http, url)
    async with http.post(url + "/v1/chat/completions", data=body, headers=headers) as resp:
        first = await resp.json()
    async with http.post(url + "/v1/chat/completions", data=body, headers=headers) as resp:
        again = await resp.json()
    after = await metrics(http, url)
    prompt = first["usage"]["prompt_tokens"]
    assert prompt > 200  # the image's visual tokens, priced for the pod's model family
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0 < cached < prompt and cached % 16 == 0  # whole blocks; the last token is recomputed
    assert after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"] == cached
    assert after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"] == 2 * prompt
    assert (
        after["mmgate_sim:encoder_cache_queries_total"] - before["mmgate_sim:encoder_cache_queries_total"]
        >= 1
    )
    assert after["vllm:mm_cache_queries_total"] - before["vllm:mm_cache_queries_total"] == 2
    assert after["vllm:mm_cache_hits_total"] - before["vllm:mm_cache_hits_total"] == 1
    assert after["vllm:request_success_total"] - before["vllm:request_success_total"] == 2


async def test_metrics_use_vllm_names_types_and_labels(fleet: SimFleet, http: aiohttp.ClientSession) -> None:
    async with http.post(fleet.urls[0] + "/v1/chat/completions", json=chat(max_tokens=3)) as resp:
        assert resp.status == 200
    async with http.get(fleet.urls[0] + "/metrics") as resp:
        text = await resp.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    expected = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prefix_cache_queries": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:mm_cache_queries": "counter",
        "vllm:mm_cache_hits": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:cache_config_info": "gauge",
        "mmgate_sim:encoder_cache_queries": "counter",
        "mmgate_sim:encoder_cache_hits": "counter",
    }
    for name, kind in expected.items():
        assert families[name].type == kind, name
    running = families["vllm:num_requests_running"].samples[0]
    assert running.labels == {"model_name": "test", "engine": "0"}
    info = families["vllm:cache_config_info"].samples[0].labels
    assert info["block_size"] == "16" and int(info["num_gpu_blocks"]) > 0
    ttft = {
        s.name: s.value for s in families["vllm:time_to_first_token_seconds"].samples if "le" not in s.labels
    }
    assert ttft["vllm:time_to_first_token_seconds_count"] == 1
    itl_count = [s for s in families["vllm:inter_token_latency_seconds"].samples if s.name.endswith("_count")]
    assert itl_count[0].value == 2
    gen = families["vllm:generation_tokens"].samples[0]
    assert gen.name == "vllm:generation_tokens_total" and gen.value == 3


async def test_models_and_health(fleet: SimFleet, http: aiohttp.ClientSession) -> None:
    async with http.get(fleet.urls[0] + "/v1/models") as resp:
        doc = await resp.json()
    assert [m["id"] for m in doc["data"]] == ["test"]
    async with http.get(fleet.urls[1] + "/health") as resp:
        assert resp.status == 200 and resp.headers[POD_HEADER] == "pod-1"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (json.dumps({"model": "test", "messages": "hi"}).encode(), 400, "messages"),
        (json.dumps(chat(max_tokens="many")).encode(), 400, "max_tokens"),
        (json.dumps(chat(max_tokens=0)).encode(), 400, "max_tokens"),
        (json.dumps(chat(kv_transfer_params={"do_remote_decode": "yes"})).encode(), 400, None),
        (json.dumps({**chat(), "model": "other"}).encode(), 404, "model"),
    ],
)
async def test_bad_requests_get_openai_shaped_4xx(
    fleet: SimFleet, http: aiohttp.ClientSession, body: bytes, status: int, param: str | None
) -> None:
    headers = {"Content-Type": "application/json"}
    async with http.post(fleet.urls[0] + "/v1/chat/completions", data=body, headers=headers) as resp:
        assert resp.status == status
        assert resp.headers[POD_HEADER] == "pod-0"
        doc = await resp.json()
    assert set(doc["error"]) == {"message", "type", "param", "code"}
    if param is not None:
        assert doc["error"]["param"] == param


async def test_prompt_longer_than_the_model_is_a_400(fleet: SimFleet, http: aiohttp.ClientSession) -> None:
    body = chat("word " * 40_000, max_tokens=4)
    async with http.post(fleet.urls[0] + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 400
        assert "max_model_len" in (await resp.json())["error"]["message"]


async def test_same_x_request_id_twice_at_once_is_fine(fleet: SimFleet, http: aiohttp.ClientSession) -> None:
    import asyncio

    headers = {"x-request-id": "same-id"}
    url = fleet.urls[0] + "/v1/chat/completions"

    async def one() -> dict[str, Any]:
        async with http.post(url, json=chat(max_tokens=20, ignore_eos=True), headers=headers) as resp:
            assert resp.status == 200
            doc: dict[str, Any] = await resp.json()
            return doc

    docs = await asyncio.gather(one(), one())
    assert [d["id"] for d in docs] == ["same-id", "same-id"]


async def test_client_disconnect_frees_the_engine(fleet: SimFleet, http: aiohttp.ClientSession) -> None:
    pod = fleet.pods[0]
    body = chat(max_tokens=5000, ignore_eos=True, stream=True)
    async with http.post(pod.url + "/v1/chat/completions", json=body) as resp:
        await resp.content.readline()
        assert pod.engine.num_requests() == 1
    for _ in range(100):
        if pod.engine.num_requests() == 0:
            break
        await asyncio.sleep(0.02)
    assert pod.engine.num_requests() == 0


@pytest.mark.parametrize("when", ["before-the-first-token", "mid-stream"])
async def test_a_client_that_resets_the_connection_leaves_no_traceback(
    when: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    # time_scale 20: the first token is ~20 ms away, long after the reset arrives.
    async with SimFleet(pods=1, profile="fast", time_scale=20.0) as fleet:
        pod = fleet.pods[0]
        body = json.dumps(chat(max_tokens=50, ignore_eos=True, stream=True)).encode()
        for _ in range(3):
            reader, writer = await asyncio.open_connection(pod.spec.host, pod.port)
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: pod\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
            )
            if when == "mid-stream":
                assert (await reader.read(65536)).startswith(b"HTTP/1.1 200 ")
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.close()
        for _ in range(200):
            if pod.engine.num_requests() == 0:
                break
            await asyncio.sleep(0.02)
        assert pod.engine.num_requests() == 0
        await asyncio.sleep(0.1)  # the handlers of aborted requests have returned
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
