"""``token-producer``: price the request in tokens and lay it out as a pseudo-token stream.

Everything downstream reads what this publishes (``TokenizedPrompt``): prefix hashing, in-flight
token load, encoder-cache affinity. Pricing is :func:`mmgate.tokens.price` and the stream is
:func:`mmgate.tokens.build_sequence`, so every media identity is part of the stream and two
requests that differ only in an image hash differently from that image on.

Parameters keep llm-d's ``estimate`` block (image/video modes, default resolution, frames), for
configs brought from llm-d. mmgate adds ``exact`` (:mod:`mmgate.tokens.served`: the served model
family's own rules, with ``defaultResolution`` / ``defaultDuration`` for media it cannot measure),
``family`` (shorthand for ``exact: {family: ...}``, with ``familyParams``) and ``provider`` (a
hosted API rule). With none set, the ``mmgate.pricing.family`` of the config applies, and without
that llm-d's estimate defaults. llm-d's ``vllm`` render backend is not offered: it puts a network
call on the routing hot path, which mmgate avoids.

A modality the served family cannot take (audio to a vision-only model) is refused with a 400
naming the part and the model unless ``mmgate.validation.modalities`` is off.

``tokens`` chooses the ids per served model (:mod:`mmgate.tokens.exact.modes`): the pseudo-token
stream (the default), or ``mode: engine`` with ``tokenizerDir``, the ids a vLLM server serving that
model computes from its tokenizer.json and chat template, which precise prefix routing against
real pods needs. Requests engine mode does not model keep the pseudo layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from mmgate.scheduling.contracts import PluginHandle, Producer
from mmgate.scheduling.keys import TOKENIZED_PROMPT, TokenizedPrompt
from mmgate.scheduling.plugins._lora import adapter_of
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest
from mmgate.tokens import EstimateConfig, Pricing, PricingConfig, build_sequence, price, price_stream
from mmgate.tokens.exact import TokenMode, TokenModes
from mmgate.tokens.served import MAX_MODELS, ExactConfig, ServedPricing, exact_pricing

if TYPE_CHECKING:  # the tokenizer needs the optional extra; modes imports it when used
    from mmgate.tokens.exact.tokenizer import EngineTokenizer


class TokenProducerParams(msgspec.Struct, forbid_unknown_fields=True):
    estimate: EstimateConfig | None = None
    exact: ExactConfig | None = None
    family: str | None = None
    familyParams: dict[str, Any] = msgspec.field(default_factory=dict)
    provider: str | None = None
    tokens: list[TokenMode] = msgspec.field(default_factory=list)  # mmgate: pseudo or engine ids per model
    # llm-d backends mmgate does not run; accepted only to say so clearly.
    vllm: Any = None
    modelName: str | None = None
    udsTokenizerConfig: Any = None


def pricing_config(
    params: TokenProducerParams, default_family: str | None, *, refuse_unserved: bool = True
) -> ServedPricing:
    """Resolve the parameters to the pricing of each served model (raises ValueError on a conflict)."""
    if params.vllm is not None or params.modelName is not None or params.udsTokenizerConfig is not None:
        raise ValueError(
            "the vllm / modelName / udsTokenizerConfig render backends are not supported by mmgate "
            "(a render call on the routing path); use estimate, exact, family or provider"
        )
    modes = (
        ("estimate", params.estimate),
        ("exact", params.exact),
        ("family", params.family),
        ("provider", params.provider),
    )
    chosen = [k for k, v in modes if v is not None and v != ""]
    if len(chosen) > 1:
        raise ValueError(f"set only one of estimate, exact, family, provider (got {', '.join(chosen)})")
    if params.familyParams and not params.family:
        raise ValueError("familyParams needs family")
    if params.provider:
        return ServedPricing(PricingConfig(family=None, provider=params.provider))
    exact = params.exact
    if params.family:
        exact = ExactConfig(family=params.family, familyParams=params.familyParams)
    if exact is not None:
        if exact.familyParams and not exact.family:
            raise ValueError("exact.familyParams needs exact.family")
        return exact_pricing(exact, exact.family or default_family, refuse_unserved=refuse_unserved)
    if params.estimate is None and default_family:
        return ServedPricing(PricingConfig(family=default_family, refuse_unserved=refuse_unserved))
    estimate = PricingConfig(
        family=None, estimate=params.estimate or EstimateConfig(), refuse_unserved=refuse_unserved
    )
    return ServedPricing(estimate)


class TokenProducer(Producer[TokenProducerParams]):
    type_name = "token-producer"
    aliases = ("tokenizer",)

    def __init__(self, name: str, params: TokenProducerParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        self.pricing = pricing_config(
            params, handle.pricing_family, refuse_unserved=handle.refuse_unserved_modalities
        )
        self.modes = TokenModes(params.tokens, lambda model: self.pricing.for_model(model).family)
        self._keys = self.own_keys(TOKENIZED_PROMPT)
        # Per served model id, its pricing and engine tokenizer: one lookup per request. Both are
        # fixed for the producer's life (built from its parameters), so nothing invalidates it.
        self._per_model: dict[str, tuple[PricingConfig, EngineTokenizer | None]] = {}

    def produces(self) -> tuple[DataKey[Any], ...]:
        return self._keys

    def for_model(self, model: str) -> tuple[PricingConfig, EngineTokenizer | None]:
        """The pricing and the engine tokenizer (``None``: the pseudo layout) of ``model``."""
        found = self._per_model.get(model)
        if found is None:
            found = (self.pricing.for_model(model), self.modes.for_model(model))
            if len(self._per_model) < MAX_MODELS:
                self._per_model[model] = found
        return found

    def tokenize(self, request: SchedulingRequest, model: str | None = None) -> TokenizedPrompt:
        """The request's tokens, priced and tokenized as ``model`` (default: the one it names;
        a LoRA adapter's requests are its base model's)."""
        view = request.view
        model = view.model if model is None else model
        # for_model(), its hit inlined: a method call is a tenth of this producer's own work
        found = self._per_model.get(model)
        config, engine = found if found is not None else self.for_model(model)
        pricing: Pricing | None = None
        if engine is not None:
            pricing = price(view, config)
            if (exact := engine.sequence(view, pricing, config.family)) is not None:
                ids, items = exact.token_ids, exact.mm_items
                media = pricing.total_tokens - pricing.text_tokens
                return TokenizedPrompt(ids, items, len(ids), media, view.cache_salt, pricing)
        if view.prompt_token_ids is None:  # the byte form: what block hashing reads
            pricing, stream = price_stream(view, config)
            total = pricing.total_tokens
            media = total - pricing.text_tokens
            return TokenizedPrompt(
                stream.token_ids, stream.mm_items, total, media, view.cache_salt, pricing, stream.data
            )
        if pricing is None:
            pricing = price(view, config)
        seq = build_sequence(view, pricing)
        total, media = pricing.total_tokens, pricing.total_tokens - pricing.text_tokens
        return TokenizedPrompt(seq.token_ids, seq.mm_items, total, media, view.cache_salt, pricing)

    def produce(self, request: SchedulingRequest, endpoints: Sequence[EndpointState]) -> None:
        adapter = adapter_of(request.view.model, endpoints)
        tp = self.tokenize(request, None if adapter is None else adapter.base)
        for key in self._keys:
            request.put(key, tp)
