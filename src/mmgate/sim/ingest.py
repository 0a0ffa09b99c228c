"""From an HTTP body to what the engine runs: the same parse and pricing the gateway uses.

The pod tokenizes with mmgate's pricing layer (text estimate + the pod's model-family counts per
media item), so a simulated pod sees the sequence lengths, media spans and identities that a real
vLLM with that model would, and its prefix-cache block keys match what the scheduler computes.
Given a model folder (``--tokenizer``) the ids are the engine-exact ones instead, laid out by the
code the gateway's engine mode runs (:class:`~mmgate.tokens.exact.tokenizer.EngineTokenizer`), so
the pod's KV events carry block hashes of real token ids; what that layout does not model keeps the
pseudo-token stream, as in the gateway.

Media identities follow vLLM: a part's ``uuid`` is the item's identifier verbatim (its caches, its
block keys, its KV events' ``extra_keys``); without one the pod uses its own content hash
(:func:`engine_mm_hash`), which a router cannot know, as it cannot know vLLM's blake3 of the
decoded media. So a gateway's precise index agrees with a simulated pod on media blocks only when
the gateway wrote its identities as uuids (``mmgate.mediaUuids``), as with a real vLLM.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mmgate.errors import RequestError
from mmgate.modelserver.knobs import Knobs, read_knobs
from mmgate.modelserver.transfer import Transfer, read_transfer
from mmgate.request import parse_request
from mmgate.request.view import Api, Modality, RequestView
from mmgate.tokens import Pricing, PricingConfig, TokenSequence, build_sequence, price

if TYPE_CHECKING:
    from mmgate.tokens.exact.tokenizer import EngineTokenizer


_FORM_APIS = frozenset({Api.TRANSCRIPTIONS, Api.TRANSLATIONS})
SPOKEN_TOKENS_PER_S = 3.0
"""Speech runs at about 150 words a minute, some 3 tokens a second."""


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
    tokenizer: EngineTokenizer | None = None,
) -> Ingested:
    """Parse, price and lay out one request; raises :class:`RequestError` for client mistakes.

    A request of an API that does not generate (embeddings, scoring, ...) runs as a prefill with
    one output token; an audio upload (a form, not JSON) takes its knobs from the parsed form."""
    if api in _FORM_APIS:
        view = parse_request(body, headers, api=api)
        knobs = Knobs(stream=view.stream)
    else:
        knobs = read_knobs(body)
        view = None
    limit = knobs.checked_limit() if api.generates else 1
    transfer = read_transfer(knobs.kv_transfer_params, knobs.ec_transfer_params)
    if view is None:
        view = parse_request(body, headers, api=api)
    for asset in view.assets:
        if not asset.client_uuid:
            asset.identity = engine_mm_hash(view.model, asset.modality, asset.identity)
    try:
        priced = price(view, pricing)
    except ValueError as exc:
        if isinstance(exc, RequestError):
            raise
        raise RequestError(str(exc)) from None
    exact = tokenizer.sequence(view, priced, pricing.family) if tokenizer is not None else None
    sequence = exact if exact is not None else build_sequence(view, priced)
    if not api.generates:
        return Ingested(view, knobs, transfer, priced, sequence, 1, "stop")
    if api in _FORM_APIS:  # a transcript is as long as the speech, not the pod's usual answer
        seconds = sum(a.duration_s or 0.0 for a in priced.assets if a.modality is Modality.AUDIO)
        natural_output_tokens = min(natural_output_tokens, max(1, math.ceil(seconds * SPOKEN_TOKENS_PER_S)))
    if knobs.ignore_eos:
        out = limit if limit is not None else natural_output_tokens
    else:
        out = natural_output_tokens if limit is None else min(limit, natural_output_tokens)
    reason = "length" if limit is not None and out >= limit else "stop"
    return Ingested(view, knobs, transfer, priced, sequence, out, reason)


def engine_mm_hash(model: str, modality: Modality, content: str) -> str:
    """The simulated pod's ``mm_hash`` of an item without a uuid: a hash of the model id, the
    modality and the content (64 hex digits, as vLLM's blake3 ``hash_kwargs``), deliberately not
    the gateway's identity. ``content`` is the payload's identity as sent; vLLM hashes the decoded
    file instead (so a URL and a data URI of one file agree there and not here)."""
    return hashlib.sha256(f"{model}\x00{modality.value}\x00{content}".encode()).hexdigest()
