"""The transfer parameters both model servers read and build, in vLLM's shapes."""

from __future__ import annotations

from typing import Any

import pytest

from mmgate.errors import RequestError
from mmgate.modelserver.transfer import (
    Transfer,
    encoder_response_params,
    prefill_response_params,
    read_transfer,
)


def test_no_parameters_ask_for_nothing_remote() -> None:
    assert read_transfer(None, None) == Transfer()


def test_prefill_leg_and_decode_leg_are_read_from_kv_transfer_params() -> None:
    # What vLLM's P/D proxy sends the prefill leg, then the decode leg.
    prefill = read_transfer({"do_remote_decode": True, "do_remote_prefill": False}, None)
    assert prefill.remote_decode and not prefill.remote_prefill
    decode = read_transfer({"do_remote_prefill": True, "remote_num_tokens": 37}, None)
    assert decode.remote_prefill and not decode.remote_decode and decode.remote_num_tokens == 37
    # vLLM's proxy leaves unset fields as null: null means false.
    assert read_transfer({"do_remote_decode": None, "do_remote_prefill": None}, None) == Transfer()


def test_ec_transfer_params_name_the_items_encoded_elsewhere() -> None:
    ec = {"img-a": {"do_remote_encode": True}, "img-b": {"do_remote_encode": True}}
    assert read_transfer(None, ec).remote_encoded == frozenset({"img-a", "img-b"})


@pytest.mark.parametrize(
    ("kv", "ec", "param"),
    [
        ([], None, "kv_transfer_params"),
        ({"do_remote_decode": True, "do_remote_prefill": True}, None, "kv_transfer_params"),
        ({"do_remote_decode": "yes"}, None, "kv_transfer_params.do_remote_decode"),
        ({"remote_num_tokens": -1}, None, "kv_transfer_params.remote_num_tokens"),
        ({"remote_num_tokens": True}, None, "kv_transfer_params.remote_num_tokens"),
        ({"remote_num_tokens": 2.5}, None, "kv_transfer_params.remote_num_tokens"),
        (None, ["img-a"], "ec_transfer_params"),
    ],
)
def test_malformed_parameters_are_a_client_error_naming_the_field(kv: Any, ec: Any, param: str) -> None:
    with pytest.raises(RequestError) as err:
        read_transfer(kv, ec)
    assert err.value.status == 400 and err.value.param == param


def test_prefill_answer_tells_the_decode_leg_where_the_kv_waits() -> None:
    params = prefill_response_params(
        engine_id="pod-1", request_id="r1", host="10.0.0.5", port=5600, block_ids=[3, 4], num_tokens=40
    )
    # NixlConnector's request_finished shape; read back, it asks the decode leg to pull the KV.
    assert params["remote_block_ids"] == [3, 4] and params["remote_engine_id"] == "pod-1"
    assert (params["remote_host"], params["remote_port"]) == ("10.0.0.5", 5600)
    assert read_transfer(params, None) == Transfer(remote_prefill=True, remote_num_tokens=40)


def test_encoder_answer_is_keyed_by_item_identity() -> None:
    params = encoder_response_params([("h1", "image", 256), ("h2", "audio", 50)], host="enc", port=7000)
    assert params["h2"] == {
        "do_remote_encode": True,
        "remote_host": "enc",
        "remote_port": 7000,
        "modality": "audio",
        "num_tokens": 50,
    }
    assert read_transfer(None, params).remote_encoded == frozenset({"h1", "h2"})
