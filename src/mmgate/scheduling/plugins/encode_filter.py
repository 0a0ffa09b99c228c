"""``encode-filter``: endpoints that can run the vision/audio encoder (E/PD, E/P/D topologies)."""

from __future__ import annotations

from mmgate.scheduling.plugins._roles import RoleFilter
from mmgate.scheduling.registry import plugin


@plugin("encode-filter")
class EncodeFilter(RoleFilter):
    roles = frozenset({"encode", "encode-prefill", "encode-prefill-decode"})
