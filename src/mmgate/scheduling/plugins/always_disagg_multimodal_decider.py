"""``always-disagg-multimodal-decider``: run the encode stage whenever the request carries media
(llm-d at HEAD: any multimodal feature in the tokenized prompt)."""

from __future__ import annotations

from typing import Any

from mmgate.scheduling.contracts import NoParams
from mmgate.scheduling.keys import TOKENIZED_PROMPT
from mmgate.scheduling.plugins._deciding import Decider
from mmgate.scheduling.types import DataKey, EndpointState, SchedulingRequest


class AlwaysDisaggMultimodalDecider(Decider[NoParams]):
    type_name = "always-disagg-multimodal-decider"

    def consumes(self) -> tuple[DataKey[Any], ...]:
        return (TOKENIZED_PROMPT,)

    def disaggregate(self, request: SchedulingRequest, decode_target: EndpointState) -> bool:
        tp = request.get(TOKENIZED_PROMPT)
        return bool(tp.media) if tp is not None else bool(request.view.assets)
