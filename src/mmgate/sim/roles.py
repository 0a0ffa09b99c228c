"""Disaggregation roles and the transfer parameters they exchange, in vLLM's shapes.

* ``encode`` (``--mm-encoder-only``): runs the vision/audio encoder only, answers with one empty
  token and ``ec_transfer_params`` keyed by each item's identity (``mm_hash``), the shape vLLM's
  EPD proxy aggregates: ``{mm_hash: {"do_remote_encode": true, "remote_host", "remote_port", ...}}``.
* ``prefill`` / ``decode`` / ``both``: what a request's ``kv_transfer_params`` asks decides the work,
  as with vLLM's NixlConnector: ``do_remote_decode`` → prefill only and return the parameters the
  decode side needs; ``do_remote_prefill`` → take the KV over the wire (``transfer_s_per_token``
  each) instead of computing it, then decode. A role only says what the pod is deployed as.
* A request carrying ``ec_transfer_params`` for an item gets that item's encoder output remotely:
  the pod skips encoding it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mmgate.errors import RequestError
from mmgate.vllm.blocks import MediaSpanLike


class Role(StrEnum):
    BOTH = "both"
    PREFILL = "prefill"
    DECODE = "decode"
    ENCODE = "encode"


KV_ROLE = {"kv_producer": Role.PREFILL, "kv_consumer": Role.DECODE, "kv_both": Role.BOTH}


def role_from_kv_transfer_config(config: dict[str, Any]) -> Role:
    """The role a vLLM ``--kv-transfer-config`` describes (``kv_role``)."""
    kv_role = config.get("kv_role", "kv_both")
    if kv_role not in KV_ROLE:
        raise ValueError(
            f"--kv-transfer-config: kv_role must be one of {', '.join(KV_ROLE)}, not {kv_role!r}"
        )
    return KV_ROLE[kv_role]


@dataclass(slots=True, frozen=True)
class Transfer:
    """What a request's transfer parameters ask of this pod."""

    remote_decode: bool = False  # prefill here, decode elsewhere: stop after the first token
    remote_prefill: bool = False  # the KV arrives from a prefill pod: no prefill compute here
    remote_num_tokens: int | None = None
    remote_encoded: frozenset[str] = frozenset()  # identities whose encoder output arrives remotely


def read_transfer(kv: Any, ec: Any) -> Transfer:
    """Validate ``kv_transfer_params`` / ``ec_transfer_params`` from a request body."""
    remote_decode = remote_prefill = False
    remote_tokens: int | None = None
    if kv is not None:
        if not isinstance(kv, dict):
            raise RequestError("kv_transfer_params must be an object", param="kv_transfer_params")
        remote_decode = _flag(kv, "do_remote_decode")
        remote_prefill = _flag(kv, "do_remote_prefill")
        if remote_decode and remote_prefill:
            raise RequestError(
                "kv_transfer_params: do_remote_decode and do_remote_prefill cannot both be true",
                param="kv_transfer_params",
            )
        n = kv.get("remote_num_tokens")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise RequestError("must be a non-negative integer", param="kv_transfer_params.remote_num_tokens")
        remote_tokens = n
    encoded: frozenset[str] = frozenset()
    if ec is not None:
        if not isinstance(ec, dict):
            raise RequestError(
                "ec_transfer_params must be an object keyed by mm_hash", param="ec_transfer_params"
            )
        encoded = frozenset(str(k) for k in ec)
    return Transfer(remote_decode, remote_prefill, remote_tokens, encoded)


def transfer_seconds(
    transfer: Transfer,
    prompt_tokens: int,
    mm_items: Sequence[MediaSpanLike],
    *,
    kv_s_per_token: float,
    ec_s_per_token: float,
) -> float:
    """Simulated seconds a pod waits for what arrives over the wire before its engine sees the
    request: the prompt's KV (``remote_num_tokens``, else the whole prompt) from a prefill pod,
    or else the encoder outputs of the remotely encoded items (a pod that receives the KV needs
    no encoder outputs). The HTTP simulator sleeps it; the DES schedules it."""
    if transfer.remote_prefill:
        n = transfer.remote_num_tokens if transfer.remote_num_tokens is not None else prompt_tokens
        return n * kv_s_per_token
    if transfer.remote_encoded:
        remote = sum(item.length for item in mm_items if item.identity in transfer.remote_encoded)
        return remote * ec_s_per_token
    return 0.0


def _flag(params: dict[str, Any], name: str) -> bool:
    value = params.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{name} must be true or false", param=f"kv_transfer_params.{name}")
    return value


def prefill_response_params(
    *, engine_id: str, request_id: str, host: str, port: int, block_ids: list[int], num_tokens: int
) -> dict[str, Any]:
    """What a prefill pod returns for the decode pod (vLLM NixlConnector's ``request_finished``)."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": block_ids,
        "remote_engine_id": engine_id,
        "remote_request_id": request_id,
        "remote_host": host,
        "remote_port": port,
        "tp_size": 1,
        "remote_num_tokens": num_tokens,
    }


def encoder_response_params(
    items: list[tuple[str, str, int]], *, host: str, port: int
) -> dict[str, dict[str, Any]]:
    """``ec_transfer_params`` of an encode-only pod: per ``(identity, modality, tokens)`` item."""
    return {
        identity: {
            "do_remote_encode": True,
            "remote_host": host,
            "remote_port": port,
            "modality": modality,
            "num_tokens": tokens,
        }
        for identity, modality, tokens in items
    }
