"""``prefill-filter``: endpoints that can prefill for another pod's decode."""

from __future__ import annotations

from mmgate.scheduling.plugins._roles import RoleFilter
from mmgate.scheduling.registry import plugin


@plugin("prefill-filter")
class PrefillFilter(RoleFilter):
    roles = frozenset({"prefill", "encode-prefill", "prefill-decode", "both", "encode-prefill-decode"})
