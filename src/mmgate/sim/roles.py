"""Disaggregation roles of a simulated pod, and the time what it receives takes to arrive.

The transfer parameters the roles exchange, in vLLM's shapes, are the model-server contract
(:mod:`mmgate.modelserver.transfer`); what each role does with them:

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
from enum import StrEnum
from typing import Any

from mmgate.modelserver.transfer import Transfer
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
