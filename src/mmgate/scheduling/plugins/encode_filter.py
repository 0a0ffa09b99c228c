"""``encode-filter``: endpoints that can run the vision/audio encoder (E/PD, E/P/D topologies)."""

from __future__ import annotations

from mmgate.scheduling.plugins._roles import RoleFilter


class EncodeFilter(RoleFilter):
    type_name = "encode-filter"

    roles = frozenset({"encode", "encode-prefill", "encode-prefill-decode"})
