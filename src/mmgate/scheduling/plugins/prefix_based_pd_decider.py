"""``prefix-based-pd-decider``: prefill remotely only when the decode pod would have to compute
at least ``nonCachedTokens`` prompt tokens itself (0 disables disaggregation), and the prompt has
at least ``promptTokens`` tokens (0 disables that gate). Token counts are the priced ones, so
media counts at its real cost."""

from __future__ import annotations

from typing import Any

import msgspec

from mmgate.scheduling.contracts import PluginHandle
from mmgate.scheduling.keys import PREFIX_MATCH, TOKENIZED_PROMPT
from mmgate.scheduling.plugins._deciding import Decider
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class PrefixPDParams(msgspec.Struct, forbid_unknown_fields=True):
    nonCachedTokens: int = 0
    promptTokens: int = 0


class PrefixBasedPDDecider(Decider[PrefixPDParams]):
    type_name = "prefix-based-pd-decider"

    def __init__(self, name: str, params: PrefixPDParams, handle: PluginHandle) -> None:
        super().__init__(name, params, handle)
        if params.nonCachedTokens < 0 or params.promptTokens < 0:
            raise ValueError("nonCachedTokens and promptTokens cannot be negative")

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (TOKENIZED_PROMPT, PREFIX_MATCH)

    def disaggregate(self, request: SchedulingRequest, decode_target: EndpointState) -> bool:
        p = self.params
        tp = request.get(TOKENIZED_PROMPT)
        if p.nonCachedTokens == 0 or tp is None:
            return False
        tokens = tp.total_tokens
        if (p.promptTokens > 0 and tokens < p.promptTokens) or tokens < p.nonCachedTokens:
            return False
        info = request.get(PREFIX_MATCH)
        cached = 0 if info is None else info.match_blocks(decode_target.name) * info.block_size
        return tokens - cached >= p.nonCachedTokens
