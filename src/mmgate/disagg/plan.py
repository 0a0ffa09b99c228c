"""The pure side of encode/prefill/decode disaggregation: what each leg's request body is (which
encoder gets which media item is the scheduler's choice, :mod:`mmgate.scheduling.encoder_assignment`).

Both ways of running the stages (the routing sidecar beside a decode pod, and the gateway itself)
call these functions, so the legs they send are the same bytes. Nothing here does I/O.

Leg shapes follow vLLM's disaggregated serving (its EPD example proxy and NixlConnector's toy
proxy) and llm-d's routing sidecar: an encode leg is the media item alone in one user message with
``max_tokens: 1``, not streamed; a prefill leg is the request with ``kv_transfer_params:
{do_remote_decode: true, ...}``, one token, not streamed; the decode request is the client's own
body (its stream and token limits untouched) plus the transfer parameters the earlier legs returned.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Body = dict[str, Any]

ENCODE_KEEP = ("model", "mm_processor_kwargs", "media_io_kwargs")
"""Request fields an encode leg keeps: they change how the item is processed, hence its hash
(vLLM's example proxy drops them, so its encoders may hash an item differently)."""

TRANSFER_FIELDS = ("kv_transfer_params", "ec_transfer_params")
"""Response fields only the stages read; a client never sees them."""

PREFILL_KV_PARAMS: Mapping[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
"""What a prefill leg asks of a NixlConnector prefill pod: prefill, keep the KV for a decode pod."""

_CHAT_PART = re.compile(r"messages\[(\d+)\]\.content\[(\d+)\](?:\..+)?")


@dataclass(frozen=True, slots=True)
class MediaItem:
    """One distinct media item of a chat request: its identity (the encoder-cache key, the same
    as the gateway's and the pod's) and the content part that carries it."""

    identity: str
    part: Mapping[str, Any]


def media_items(body: Body, located: Iterable[tuple[str, str]]) -> list[MediaItem]:
    """The distinct media items of a chat body, in prompt order, from ``(identity, field)`` pairs
    of the parsed request (``field`` is a JSON path inside the part, ``messages[i].content[j]...``).

    Repeated references to one item are listed once: encoding it once is enough. An item at a
    path other than a chat content part is left to the decode pod, which encodes it itself.
    """
    messages = body.get("messages")
    out: list[MediaItem] = []
    seen: set[str] = set()
    if not isinstance(messages, list):
        return out
    for identity, field in located:
        match = _CHAT_PART.fullmatch(field)
        if match is None or identity in seen:
            continue
        i, j = int(match.group(1)), int(match.group(2))
        content = messages[i].get("content") if i < len(messages) and isinstance(messages[i], dict) else None
        if not isinstance(content, list) or j >= len(content) or not isinstance(content[j], dict):
            continue
        seen.add(identity)
        out.append(MediaItem(identity, content[j]))
    return out


def spread(count: int, encoders: Sequence[str]) -> list[str]:
    """llm-d's sidecar rule for a plain list: item ``i`` to ``encoders[i % n]``. A gateway that
    plans per item lists one encoder per distinct item, so the rule sends each where planned."""
    return [encoders[i % len(encoders)] for i in range(count)]


def encode_body(body: Body, item: MediaItem) -> Body:
    """The encode leg for one item: the item alone in one user message, one token, not streamed
    (its ``uuid``, if the client gave one, travels inside the part)."""
    leg: Body = {key: body[key] for key in ENCODE_KEEP if key in body}
    leg["messages"] = [{"role": "user", "content": [dict(item.part)]}]
    leg["max_tokens"] = 1
    leg["stream"] = False
    return leg


def prefill_body(body: Body, ec_params: Mapping[str, Any] | None) -> Body:
    """The prefill leg: the request itself, prefill only, KV kept for the decode pod; the media's
    encoder outputs come from the encoders when they ran (``ec_params``)."""
    leg = one_token(body)
    leg["kv_transfer_params"] = dict(PREFILL_KV_PARAMS)
    if ec_params:
        leg["ec_transfer_params"] = dict(ec_params)
    return leg


def one_token(body: Body) -> Body:
    """``body`` asking for one token, not streamed (every token-limit field the client set is 1)."""
    leg = dict(body)
    leg.pop("stream_options", None)
    leg["stream"] = False
    leg["max_tokens"] = 1
    if "max_completion_tokens" in leg:
        leg["max_completion_tokens"] = 1
    return leg


def decode_body(
    body: Body, *, ec_params: Mapping[str, Any] | None, kv_params: Mapping[str, Any] | None
) -> Body:
    """The request the decode (or PD) pod serves: the client's own body with the transfer
    parameters added. The encoder outputs go to whichever pod prefills: with a prefill leg that
    was the prefill pod, so a decode-only pod never receives ``ec_transfer_params``."""
    out = {k: v for k, v in body.items() if k not in TRANSFER_FIELDS}
    if kv_params is not None:
        out["kv_transfer_params"] = dict(kv_params)
    elif ec_params:
        out["ec_transfer_params"] = dict(ec_params)
    return out


def merge_ec_params(responses: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Every encode leg's ``ec_transfer_params`` (keyed by item identity) in one map; a leg that
    returned none adds nothing (its item is then encoded where it is consumed)."""
    merged: dict[str, Any] = {}
    for response in responses:
        params = response.get("ec_transfer_params")
        if isinstance(params, dict):
            merged.update(params)
    return merged


def parse_hosts(value: str) -> list[str]:
    """``host:port`` entries of a routing header (comma-separated, blanks dropped)."""
    return [h.strip() for h in value.split(",") if h.strip()]


def split_host(entry: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` or ``[v6]:port``; ``ValueError`` when it is neither."""
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port: {entry!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)
