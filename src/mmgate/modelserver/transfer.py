"""The transfer parameters disaggregated model servers exchange, in vLLM's shapes.

A prefill instance answers with ``kv_transfer_params`` that tell the decode instance where the
prompt's KV waits (vLLM NixlConnector's ``request_finished``); an encode-only instance
(``--mm-encoder-only``) answers with ``ec_transfer_params`` keyed by each item's identity
(``mm_hash``), the shape vLLM's EPD proxy aggregates. The gateway's orchestration passes them on
to the next leg, which reads them here. The simulator's pods and the reference engine build and
read them alike, so a gateway cannot tell which one answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmgate.errors import RequestError

__all__ = ["Transfer", "encoder_response_params", "prefill_response_params", "read_transfer"]


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
