"""The encode-only pod's encoder: one request at a time per lane; with encoder data parallelism
(``--mm-encoder-tp-mode data``) one lane per GPU of the replica."""

from __future__ import annotations

import asyncio

import pytest

from mmgate.sim.encode_only import EncodeOnly
from mmgate.sim.faults import Faults, FaultSettings
from mmgate.sim.profiles import load_profile
from support.waiting import until


@pytest.mark.parametrize(("mode", "lanes", "at_once"), [("weights", 4, 1), ("data", 2, 2), ("data", 4, 3)])
async def test_requests_encode_at_once_on_as_many_lanes_as_the_replica_has_gpus(
    mode: str, lanes: int, at_once: int
) -> None:
    encoder = EncodeOnly(load_profile("fast"), mode=mode, lanes=lanes)
    faults = Faults(FaultSettings(stalled=True))  # each request holds its lane until released
    tasks = [asyncio.create_task(encoder.encode([(f"img{i}", 64)], faults, 1.0)) for i in range(3)]
    await until(lambda: encoder.encoding == at_once, f"{at_once} request(s) on a lane")
    await asyncio.sleep(0.05)
    assert encoder.encoding == at_once  # the others wait for a lane
    faults.update({"stalled": False})
    await asyncio.gather(*tasks)
    assert encoder.encoding == 0 and encoder.encoded_items == 3
