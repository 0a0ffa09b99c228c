"""``decode-filter``: endpoints that can decode; an endpoint without a role label decodes too."""

from __future__ import annotations

from mmgate.scheduling.plugins._roles import RoleFilter
from mmgate.scheduling.registry import plugin


@plugin("decode-filter")
class DecodeFilter(RoleFilter):
    roles = frozenset({"decode", "prefill-decode", "both", "encode-prefill-decode"})
    accept_unlabelled = True
