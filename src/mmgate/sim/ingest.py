"""From an HTTP body to what the engine runs: the same parse and pricing the gateway uses.

The pod tokenizes with mmgate's pricing layer (text estimate + the pod's model-family counts per
media item), so a simulated pod sees the sequence lengths, media spans and identities that a real
vLLM with that model would, and its prefix-cache block keys match what the scheduler computes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from mmgate.errors import RequestError
from mmgate.request import parse_request
from mmgate.request.view import Api, RequestView
from mmgate.sim.roles import Transfer, read_transfer
from mmgate.tokens import Pricing, PricingConfig, TokenSequence, build_sequence, price


class _StreamOptions(msgspec.Struct):
    include_usage: bool = False


class Knobs(msgspec.Struct):
    """The generation fields the simulator honours (the parser reads the prompt)."""

    stream: bool = False
    stream_options: _StreamOptions | None = None
    ignore_eos: bool = False
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    kv_transfer_params: Any = None
    ec_transfer_params: Any = None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


_KNOBS = msgspec.json.Decoder(Knobs)


@dataclass(slots=True)
class Ingested:
    view: RequestView
    knobs: Knobs
    transfer: Transfer
    pricing: Pricing
    sequence: TokenSequence
    output_tokens: int  # how many tokens the answer will have
    reason: str  # "length" when the client's limit cuts it, else "stop"


def ingest(
    body: bytes,
    headers: Mapping[str, str],
    api: Api,
    pricing: PricingConfig,
    *,
    natural_output_tokens: int,
) -> Ingested:
    """Parse, price and lay out one request; raises :class:`RequestError` for client mistakes."""
    try:
        knobs = _KNOBS.decode(body)
    except msgspec.ValidationError as exc:
        raise RequestError(str(exc), param=_field_of(exc)) from None
    except msgspec.DecodeError as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None
    limit = knobs.limit
    if limit is not None and limit < 1:
        param = "max_completion_tokens" if knobs.max_completion_tokens is not None else "max_tokens"
        raise RequestError(f"{param} must be at least 1, got {limit}", param=param)
    transfer = read_transfer(knobs.kv_transfer_params, knobs.ec_transfer_params)
    view = parse_request(body, headers, api=api)
    try:
        priced = price(view, pricing)
    except ValueError as exc:
        if isinstance(exc, RequestError):
            raise
        raise RequestError(str(exc)) from None
    sequence = build_sequence(view, priced)
    if knobs.ignore_eos:
        out = limit if limit is not None else natural_output_tokens
    else:
        out = natural_output_tokens if limit is None else min(limit, natural_output_tokens)
    reason = "length" if limit is not None and out >= limit else "stop"
    return Ingested(view, knobs, transfer, priced, sequence, out, reason)


def _field_of(exc: msgspec.ValidationError) -> str | None:
    """``Expected `int`, got `str` - at `$.max_tokens``` → ``max_tokens``."""
    text = str(exc)
    marker = "at `$."
    if marker not in text:
        return None
    return text.rsplit(marker, 1)[1].rstrip("`")
