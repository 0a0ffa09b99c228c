"""The encode-only pod: its front end loads every request's media (cache hits too) and preprocesses
new items; its encoder takes one request at a time per lane; with encoder data parallelism
(``--mm-encoder-tp-mode data``) one lane per GPU of the replica."""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp
import pytest

from mmgate.sim.core.media import load_ms
from mmgate.sim.core.types import MediaPayload
from mmgate.sim.encode_only import EncodeOnly
from mmgate.sim.faults import Faults, FaultSettings
from mmgate.sim.fleet import SimFleet
from mmgate.sim.profiles import load_profile
from mmgate.sim.roles import Role
from mmgate.sim.spec import PodSpec
from support.bodies import chat, data_uri, image_part
from support.stack import png
from support.waiting import until


@pytest.mark.parametrize(("mode", "lanes", "at_once"), [("weights", 4, 1), ("data", 2, 2), ("data", 4, 3)])
async def test_requests_encode_at_once_on_as_many_lanes_as_the_replica_has_gpus(
    mode: str, lanes: int, at_once: int
) -> None:
    encoder = EncodeOnly(load_profile("fast"), mode=mode, lanes=lanes)
    faults = Faults(FaultSettings(stalled=True))  # each request holds its lane until released
    tasks = [asyncio.create_task(encoder.encode([(f"img{i}", 64, "image")], faults, 1.0)) for i in range(3)]
    await until(lambda: encoder.encoding == at_once, f"{at_once} request(s) on a lane")
    await asyncio.sleep(0.05)
    assert encoder.encoding == at_once  # the others wait for a lane
    faults.update({"stalled": False})
    await asyncio.gather(*tasks)
    assert encoder.encoding == 0 and encoder.encoded_items == 3


def test_the_front_end_loads_every_payload_and_preprocesses_only_what_is_new() -> None:
    profile = load_profile("qwen3-vl-32b-h200-tp2")
    encoder = EncodeOnly(profile)
    photo = MediaPayload(base64_bytes=1 << 20, file_bytes=3 << 18, pixels=1_000_000, fmt="jpeg")
    load = load_ms(profile.media_load, photo) / 1000.0
    assert load > 0
    front, gpu = encoder.work([("cat", 1000, "image")], [photo])
    assert front > load and gpu > 0  # loaded, preprocessed, encoded
    again, gpu_again = encoder.work([("cat", 1000, "image")], [photo])
    assert again == pytest.approx(load) and gpu_again == 0.0  # a hit: loaded all the same, nothing else
    assert encoder.load_s == pytest.approx(2 * load)
    named, _ = encoder.work([("cat", 1000, "image")], [dataclasses.replace(photo, hashed=False)])
    assert named < load  # a part with its uuid is not hashed


async def test_an_encode_only_pod_loads_the_media_of_every_request_it_serves() -> None:
    spec = PodSpec(name="enc", profile="qwen3-vl-32b-h200-tp2", role=Role.ENCODE, time_scale=0.01)
    async with SimFleet([spec]) as fleet, aiohttp.ClientSession() as http:
        pod = fleet["enc"]
        assert pod.encoder is not None
        image = image_part(data_uri(png(3, (448, 448))))
        body = chat(image, "What is this?", model=pod.model, max_tokens=1, ignore_eos=True)
        loaded = []
        for _ in range(2):
            async with http.post(pod.url + "/v1/chat/completions", data=body) as r:
                assert r.status == 200
            loaded.append(pod.encoder.load_s)
        assert pod.encoder.encoded_items == 1 and pod.encoder.hits == 1
        assert loaded[0] > 0 and loaded[1] == pytest.approx(2 * loaded[0])  # the hit was loaded too


def test_a_modality_with_its_own_encoder_costs_that_encoder() -> None:
    profile = load_profile("qwen2.5-omni-7b-h100")
    audio = profile.modality_encoders()["audio"]
    encoder = EncodeOnly(profile)
    _, heard = encoder.work([("clip", 750, "audio")])
    _, seen = encoder.work([("photo", 750, "image")])
    assert heard == pytest.approx(audio.ms(750) / 1000) and seen == pytest.approx(
        profile.encoder.ms(750) / 1000
    )
    assert heard != seen
