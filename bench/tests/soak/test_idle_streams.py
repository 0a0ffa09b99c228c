"""``mmgate bench idle-streams`` run small: what an open-but-silent stream costs the gateway."""

from __future__ import annotations

from mmgate_bench.soak.idle_streams import measure
from support.processes import mmgate_command, subprocess_env


async def test_memory_stays_bounded_with_hundreds_of_idle_streams() -> None:
    result = await measure(300, mmgate_command(), env=subprocess_env())
    assert result.opened == result.completed == 300
    # An idle stream costs the gateway tens of KB (two sockets, two parsers, buffers), not MBs;
    # the full 10,000-stream figure is in docs/reliability.md (mmgate bench idle-streams).
    assert result.kb_per_stream < 150, result
