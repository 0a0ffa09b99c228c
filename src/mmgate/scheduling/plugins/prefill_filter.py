"""``prefill-filter``: endpoints that can prefill for another pod's decode."""

from __future__ import annotations

from mmgate.scheduling.plugins._roles import RoleFilter


class PrefillFilter(RoleFilter):
    type_name = "prefill-filter"

    roles = frozenset({"prefill", "encode-prefill", "prefill-decode", "both", "encode-prefill-decode"})
