"""End to end: (e) SSE arrives token by token through the gateway, and unmodified external clients
(the ``openai`` package and plain ``curl``) work against it, streaming included."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
from pathlib import Path

import openai
import orjson
import pytest

from support.stack import ENCODER_AFFINITY, chat_body, png, stack

pytestmark = pytest.mark.slow


async def test_e_sse_streams_arrive_token_by_token() -> None:
    # time_scale 20: each decode step of the fast profile takes ~20 ms of wall time.
    async with stack(ENCODER_AFFINITY, pods=2, time_scale=20.0) as s:
        body = chat_body(s.model, "count slowly", [png(1)], max_tokens=12, stream=True)
        loop = asyncio.get_running_loop()
        arrivals: list[float] = []
        events: list[bytes] = []
        async with s.session.post(s.url + "/v1/chat/completions", data=body) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            async for line in resp.content:
                if line.startswith(b"data: "):
                    arrivals.append(loop.time())
                    events.append(line)
    assert events[-1].strip() == b"data: [DONE]"
    deltas = [orjson.loads(e[6:]) for e in events[:-1]]
    content_events = [d for d in deltas if d["choices"] and d["choices"][0]["delta"].get("content")]
    assert len(content_events) >= 10
    # Relayed as produced: the events are spread over the decode, not delivered in one burst.
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert sum(1 for g in gaps if g > 0.005) >= 8
    assert arrivals[-1] - arrivals[0] > 0.1


async def test_openai_client_chat_completions_models_and_streaming_usage() -> None:
    async with stack(ENCODER_AFFINITY, pods=2) as s:
        client = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key="sk-test", max_retries=0)
        try:
            models = await client.models.list()
            assert [m.id for m in models.data] == [s.model]

            image = "data:image/png;base64," + __import__("base64").b64encode(png(3)).decode()
            chat = await client.chat.completions.create(
                model=s.model,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is in this picture?"},
                            {"type": "image_url", "image_url": {"url": image}},
                        ],
                    }
                ],
                max_tokens=8,
            )
            assert chat.choices[0].message.content
            assert chat.usage is not None and chat.usage.prompt_tokens > 0

            raw = await client.chat.completions.with_raw_response.create(
                model=s.model, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
            assert raw.headers["x-mmgate-endpoint"] in [u.split("//")[1] for u in s.fleet.urls]

            completion = await client.completions.create(
                model=s.model, prompt="Once upon a time", max_tokens=6
            )
            assert completion.choices[0].text

            stream = await client.chat.completions.create(
                model=s.model,
                messages=[{"role": "user", "content": "stream please"}],
                max_tokens=6,
                stream=True,
                stream_options={"include_usage": True},
            )
            pieces: list[str] = []
            usage = None
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                if chunk.usage is not None:
                    usage = chunk.usage
            assert pieces and usage is not None and usage.completion_tokens == 6

            with pytest.raises(openai.NotFoundError) as missing:
                await client.chat.completions.create(
                    model="no-such-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2
                )
            assert missing.value.status_code == 404
            with pytest.raises(openai.BadRequestError) as bad:
                await client.chat.completions.create(model=s.model, messages="not a list", max_tokens=2)  # type: ignore[arg-type]
            assert bad.value.status_code == 400
        finally:
            await client.close()


async def test_curl_plain_and_streaming(tmp_path: Path) -> None:
    async with stack(ENCODER_AFFINITY, pods=2) as s:
        request = tmp_path / "ask.json"
        request.write_bytes(chat_body(s.model, "What is this?", [png(4)], max_tokens=5))
        url = s.url + "/v1/chat/completions"

        def curl(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["curl", "-sS", *args], capture_output=True, text=True, timeout=30, check=False
            )

        plain = await asyncio.to_thread(
            curl, "-D", "-", url, "-H", "Content-Type: application/json", "-d", f"@{request}"
        )
        assert plain.returncode == 0, plain.stderr
        head, _, payload = plain.stdout.partition("\n\n")  # text mode folds CRLF
        assert head.startswith("HTTP/1.1 200")
        assert "x-mmgate-endpoint:" in head.lower() and "x-mmgate-request-tokens:" in head.lower()
        assert orjson.loads(payload)["choices"][0]["message"]["content"]

        stream_body = tmp_path / "stream.json"
        stream_body.write_bytes(chat_body(s.model, "stream it", max_tokens=5, stream=True))
        streamed = await asyncio.to_thread(
            curl, "-N", url, "-H", "Content-Type: application/json", "-d", f"@{stream_body}"
        )
        assert streamed.returncode == 0, streamed.stderr
        lines = [line for line in streamed.stdout.splitlines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]" and len(lines) >= 6


async def test_openai_client_retrieves_a_model_whose_id_has_a_slash() -> None:
    """``models.retrieve`` sends the slash percent-encoded; curl users type it as is (vLLM takes both)."""
    model = "Qwen/Qwen3-VL-32B-Instruct"
    async with stack(ENCODER_AFFINITY, pods=1, model=model) as s:
        client = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key="sk-test", max_retries=0)
        try:
            card = await client.models.retrieve(model)
            assert card.id == model and card.object == "model"
            with pytest.raises(openai.NotFoundError) as missing:
                await client.models.retrieve("qwen/qwen3-vl-32b-instruct")
            error = missing.value.body
            assert isinstance(error, dict) and error["code"] == "model_not_found"
            assert f"did you mean '{model}'" in error["message"] and error["param"] == "model"
        finally:
            await client.close()
        async with s.session.get(s.url + "/v1/models/" + model) as resp:  # the unencoded form
            assert resp.status == 200 and (await resp.json())["id"] == model
        async with s.session.head(s.url + "/v1/models/Qwen%2FQwen3-VL-32B-Instruct") as resp:
            assert resp.status == 200


async def test_a_typo_in_a_route_or_a_model_case_gets_a_did_you_mean() -> None:
    model = "Qwen/Qwen3-VL-32B-Instruct"
    async with stack(ENCODER_AFFINITY, pods=1, model=model) as s:
        body = chat_body(model, "hi", max_tokens=2)
        async with s.session.post(s.url + "/v1/chat/completion", data=body) as resp:
            assert resp.status == 404
            error = (await resp.json())["error"]
            assert error["message"] == (
                "Not Found: POST /v1/chat/completion (did you mean '/v1/chat/completions'?)"
            )
            assert error["code"] == "unknown_route"
        wrong_case = chat_body(model.lower(), "hi")
        async with s.session.post(s.url + "/v1/chat/completions", data=wrong_case) as resp:
            assert resp.status == 404
            error = (await resp.json())["error"]
            assert error["code"] == "model_not_found" and f"(did you mean '{model}'?)" in error["message"]
