"""``prefill-header-handler``: tell the decode pod's sidecar which pod prefills (llm-d's name).

When the ``prefill`` profile ran, the upstream request carries ``x-prefiller-host-port`` with its
target's ``host:port``. A disaggregated config without this plugin gets one by default (see
docs/plugins/disaggregation.md), so an llm-d config that lists it and one that does not behave alike.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from mmgate.scheduling.plugins._header_handler import PREFILLER_HEADER, HeaderHandler


class PrefillHeaderParams(msgspec.Struct, forbid_unknown_fields=True):
    prefillProfile: str = "prefill"


class PrefillHeaderHandler(HeaderHandler[PrefillHeaderParams]):
    type_name = "prefill-header-handler"
    routing_header: ClassVar[str] = PREFILLER_HEADER
    first_only: ClassVar[bool] = True

    def profile_of(self, params: PrefillHeaderParams) -> str:
        return params.prefillProfile
