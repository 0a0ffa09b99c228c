"""Disaggregation roles: the transfer parameters an E/P/D proxy reads and forwards."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest

from mmgate.sim.cli import add_arguments, endpoints_doc, specs_from_args
from mmgate.sim.fleet import SimFleet
from mmgate.sim.roles import Role, role_from_kv_transfer_config
from mmgate.sim.spec import PodSpec
from support.bodies import chat, data_uri, image_part
from support.stack import png

PREFILL_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def _post(http: aiohttp.ClientSession, url: str, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with http.post(url + "/v1/chat/completions", data=msgspec.json.encode(doc)) as resp:
        return resp.status, await resp.json()


def _image_request(tag: int, **extra: Any) -> dict[str, Any]:
    image = image_part(data_uri(png(tag, (448, 448))))
    body = chat(image, "What is this?", model="test", max_tokens=8, ignore_eos=True)
    doc: dict[str, Any] = msgspec.json.decode(body)
    doc.update(extra)
    return doc


def test_kv_role_maps_to_pod_role() -> None:
    assert (
        role_from_kv_transfer_config({"kv_connector": "NixlConnector", "kv_role": "kv_producer"})
        is Role.PREFILL
    )
    assert role_from_kv_transfer_config({"kv_role": "kv_consumer"}) is Role.DECODE
    with pytest.raises(ValueError, match="kv_role"):
        role_from_kv_transfer_config({"kv_role": "kv_sometimes"})


async def test_encoder_only_pod_returns_ec_transfer_params_per_item(http: aiohttp.ClientSession) -> None:
    specs = [PodSpec(name="enc", profile="fast", role=Role.ENCODE)]
    async with SimFleet(specs) as fleet:
        pod = fleet["enc"]
        status, doc = await _post(http, pod.url, _image_request(1))
        assert status == 200
        params = doc["ec_transfer_params"]
        assert len(params) == 1
        ((mm_hash, entry),) = params.items()
        assert entry["do_remote_encode"] is True
        assert (entry["remote_host"], entry["remote_port"]) == ("127.0.0.1", pod.port)
        assert entry["modality"] == "image" and entry["num_tokens"] > 0
        assert doc["usage"]["completion_tokens"] == 0
        # a repeat is an encoder-cache hit; the LM side never ran
        status, again = await _post(http, pod.url, _image_request(1))
        assert status == 200 and set(again["ec_transfer_params"]) == {mm_hash}
        stats = pod.stats()
        assert (stats.encoder_cache_queries, stats.encoder_cache_hits) == (2, 1)
        assert stats.prompt_tokens == 0


async def test_prefill_then_decode_with_kv_transfer_params(http: aiohttp.ClientSession) -> None:
    specs = [
        PodSpec(name="prefill", profile="fast", role=Role.PREFILL),
        PodSpec(name="decode", profile="fast", role=Role.DECODE),
    ]
    async with SimFleet(specs) as fleet:
        p_status, p_doc = await _post(
            http, fleet["prefill"].url, _image_request(2, kv_transfer_params=PREFILL_PARAMS, max_tokens=1)
        )
        assert p_status == 200
        assert p_doc["usage"]["completion_tokens"] == 1
        kv = p_doc["kv_transfer_params"]
        assert kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False
        assert kv["remote_port"] == fleet["prefill"].port
        prompt = p_doc["usage"]["prompt_tokens"]
        assert len(kv["remote_block_ids"]) == -(-prompt // 16)
        assert kv["remote_num_tokens"] == prompt
        for field in ("remote_engine_id", "remote_request_id", "remote_host"):
            assert kv[field]

        d_status, d_doc = await _post(http, fleet["decode"].url, _image_request(2, kv_transfer_params=kv))
        assert d_status == 200
        assert d_doc["usage"]["completion_tokens"] == 8
        assert "kv_transfer_params" not in d_doc
        # the decode pod took the prompt's KV over the wire: only the last token was computed there
        # (counted as cached, as vLLM does), and its encoder never ran
        assert d_doc["usage"]["prompt_tokens_details"]["cached_tokens"] == prompt - 1
        assert fleet["decode"].metrics.encoder_s == 0.0
        assert fleet["prefill"].metrics.encoder_s > 0.0
        assert fleet["decode"].engine.stats().prefix_cache_hits == 0  # remote KV is not a local hit


async def test_items_in_ec_transfer_params_are_not_encoded_again(http: aiohttp.ClientSession) -> None:
    async with SimFleet(profile="fast") as fleet:
        pod = fleet.pods[0]
        status, local = await _post(http, pod.url, _image_request(4))
        assert status == 200 and pod.metrics.encoder_s > 0
        before = pod.metrics.encoder_s
        body = _image_request(5)
        image_id = "remote-image"
        body["messages"][0]["content"][0]["uuid"] = image_id
        body["ec_transfer_params"] = {
            image_id: {"do_remote_encode": True, "remote_host": "h", "remote_port": 1}
        }
        status, remote = await _post(http, pod.url, body)
        assert status == 200
        assert pod.metrics.encoder_s == before
        assert remote["usage"]["prompt_tokens"] == local["usage"]["prompt_tokens"]


async def test_conflicting_transfer_flags_are_a_client_error(http: aiohttp.ClientSession) -> None:
    async with SimFleet(profile="fast") as fleet:
        bad = {"do_remote_decode": True, "do_remote_prefill": True}
        status, doc = await _post(http, fleet.urls[0], _image_request(3, kv_transfer_params=bad))
    assert status == 400 and doc["error"]["param"] == "kv_transfer_params"


def _specs_from_flags(*flags: str) -> list[PodSpec]:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return specs_from_args(parser.parse_args(["--profile", "fast", "--base-port", "0", *flags]))


async def test_prefill_and_decode_roles_are_labels_each_request_decides(http: aiohttp.ClientSession) -> None:
    # docs/sim.md: --role prefill|decode|both only labels the pod (startup table, --endpoints-file);
    # what a request's kv_transfer_params asks decides the work, whatever the role.
    (prefill,) = _specs_from_flags("--role", "prefill")
    (decode,) = _specs_from_flags(
        "--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}'
    )
    prefill.name, decode.name = "p", "d"
    async with SimFleet([prefill, decode]) as fleet:
        assert [(e["name"], e["role"]) for e in endpoints_doc(fleet)] == [("p", "prefill"), ("d", "decode")]
        for pod in ("p", "d"):
            status, doc = await _post(http, fleet[pod].url, _image_request(10))
            assert status == 200 and doc["usage"]["completion_tokens"] == 8  # served end to end
            assert "kv_transfer_params" not in doc
        status, doc = await _post(
            http, fleet["d"].url, _image_request(11, kv_transfer_params=PREFILL_PARAMS, max_tokens=1)
        )
        assert (
            status == 200 and doc["kv_transfer_params"]["do_remote_prefill"] is True
        )  # a decode pod prefills
