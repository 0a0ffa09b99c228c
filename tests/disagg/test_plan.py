"""The pure side of disaggregation: the bodies of the legs."""

from __future__ import annotations

import msgspec
import pytest

from mmgate.disagg import plan
from mmgate.disagg.orchestrate import strip_transfer_fields
from mmgate.disagg.stages import AllowList

IMG = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}, "uuid": "cat"}
DOG = {"type": "image_url", "image_url": {"url": "https://example.test/dog.png"}}
BODY = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "compare"}, IMG, DOG, IMG]},
    ],
    "stream": True,
    "stream_options": {"include_usage": True},
    "max_tokens": 50,
    "max_completion_tokens": 50,
    "mm_processor_kwargs": {"max_pixels": 100352},
}
LOCATED = [
    ("cat", "messages[1].content[1].image_url.url"),
    ("dog", "messages[1].content[2].image_url.url"),
    ("cat", "messages[1].content[3].image_url.url"),
]


def test_repeated_items_are_listed_once_in_prompt_order() -> None:
    items = plan.media_items(BODY, LOCATED)
    assert [i.identity for i in items] == ["cat", "dog"]
    assert items[1].part == DOG


def test_an_item_outside_a_chat_content_part_is_left_to_the_decode_pod() -> None:
    assert plan.media_items(BODY, [("x", "prompt[0]"), ("y", "messages[7].content[0]")]) == []


def test_an_encode_leg_is_the_item_alone_one_token_not_streamed() -> None:
    leg = plan.encode_body(BODY, plan.media_items(BODY, LOCATED)[0])
    assert leg == {
        "model": "m",
        "mm_processor_kwargs": {"max_pixels": 100352},
        "messages": [{"role": "user", "content": [IMG]}],
        "max_tokens": 1,
        "stream": False,
    }


def test_the_prefill_leg_asks_for_remote_decode_and_one_token() -> None:
    leg = plan.prefill_body(BODY, {"cat": {"do_remote_encode": True}})
    assert leg["kv_transfer_params"]["do_remote_decode"] is True
    assert leg["kv_transfer_params"]["do_remote_prefill"] is False
    assert (leg["max_tokens"], leg["max_completion_tokens"], leg["stream"]) == (1, 1, False)
    assert "stream_options" not in leg
    assert leg["ec_transfer_params"] == {"cat": {"do_remote_encode": True}}
    assert BODY["max_tokens"] == 50 and BODY["stream"] is True  # the client's body is untouched


def test_a_decode_only_pod_never_gets_encoder_outputs_and_keeps_the_clients_limits() -> None:
    kv = {"do_remote_prefill": True, "remote_block_ids": [1, 2], "remote_engine_id": "p"}
    ec = {"cat": {"do_remote_encode": True}}
    after_prefill = plan.decode_body(BODY, ec_params=ec, kv_params=kv)
    assert after_prefill["kv_transfer_params"] == kv  # unchanged
    assert "ec_transfer_params" not in after_prefill
    assert (after_prefill["stream"], after_prefill["max_tokens"]) == (True, 50)
    assert after_prefill["stream_options"] == {"include_usage": True}
    pd = plan.decode_body(BODY, ec_params=ec, kv_params=None)  # E/PD: the PD pod prefills
    assert pd["ec_transfer_params"] == ec and "kv_transfer_params" not in pd


def test_client_supplied_transfer_parameters_never_reach_the_decode_pod() -> None:
    spoofed = {**BODY, "kv_transfer_params": {"remote_host": "10.9.9.9"}, "ec_transfer_params": {"x": {}}}
    assert not set(plan.TRANSFER_FIELDS) & set(plan.decode_body(spoofed, ec_params=None, kv_params=None))


def test_encoder_outputs_are_merged_and_a_leg_without_any_adds_nothing() -> None:
    merged = plan.merge_ec_params(
        [{"ec_transfer_params": {"a": {"n": 1}}}, {}, {"ec_transfer_params": {"b": {}}}]
    )
    assert merged == {"a": {"n": 1}, "b": {}}


def test_spread_follows_a_per_item_list_and_round_robins_a_short_one() -> None:
    assert plan.spread(3, ["a", "b", "a"]) == ["a", "b", "a"]
    assert plan.spread(3, ["a", "b"]) == ["a", "b", "a"]


@pytest.mark.parametrize("bad", ["nohost", "h:", ":80", "h:0", "h:70000", "h:x"])
def test_a_routing_header_entry_must_be_host_port(bad: str) -> None:
    with pytest.raises(ValueError):
        plan.split_host(bad)


def test_host_port_entries() -> None:
    assert plan.parse_hosts(" a:1, ,b:2 ") == ["a:1", "b:2"]
    assert plan.split_host("[::1]:8000") == ("::1", 8000)


def test_a_client_never_sees_transfer_parameters() -> None:
    body = msgspec.json.encode(
        {"id": "x", "choices": [], "kv_transfer_params": None, "ec_transfer_params": {}}
    )
    assert msgspec.json.decode(strip_transfer_fields(body)) == {"id": "x", "choices": []}
    plain = b'{"id":"y"}'
    assert strip_transfer_fields(plain) is plain


def test_the_allow_list_takes_hosts_and_pod_networks_with_a_port() -> None:
    allow = AllowList(["10.0.0.5:8000", "10.244.0.0/16:8000", "fd00::/64:9000"])
    assert "10.0.0.5:8000" in allow
    assert "10.244.3.7:8000" in allow
    assert "[fd00::12]:9000" in allow
    assert "10.244.3.7:8001" not in allow  # the network's port only
    assert "10.245.0.1:8000" not in allow
    assert "encoder.internal:8000" not in allow  # names only by exact entry
    with pytest.raises(ValueError):
        AllowList(["10.0.0.0/99:80"])
