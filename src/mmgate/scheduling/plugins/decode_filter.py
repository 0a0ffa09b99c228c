"""``decode-filter``: endpoints that can decode; an endpoint without a role label decodes too."""

from __future__ import annotations

from mmgate.scheduling.plugins._roles import RoleFilter


class DecodeFilter(RoleFilter):
    type_name = "decode-filter"

    roles = frozenset({"decode", "prefill-decode", "both", "encode-prefill-decode"})
    accept_unlabelled = True
