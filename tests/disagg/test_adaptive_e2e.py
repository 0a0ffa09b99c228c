"""``adaptive-encode-decider`` over HTTP, in both ways of running the legs: one workload's requests
encoded both where they are served and on the encode pods, each as its predicted costs say (the
priced costs without a TTFT SLO; with one, the tier while the request's predicted TTFT through it
meets the SLO), and the tier signals following the encoder work the gateway placed
(examples/e-pd-adaptive.yaml in front of simulated pods; the helpers are tests/disagg/test_e2e.py's)."""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from disagg.test_e2e import E_PD, EXAMPLES, MODES, SLOW_ENCODER, post, specs, stack
from mmgate.sim.fleet import SimFleet
from support.stack import chat_body, png

LIGHT = (448, 448)  # one thumbnail under a question: 196 visual tokens
HEAVY = (1536, 1536)  # four photos of 2,304 visual tokens each


def light(seed: int) -> list[bytes]:
    return [png(seed, LIGHT)]


def heavy(seed: int) -> list[bytes]:
    return [png(seed * 10 + i, HEAVY) for i in range(4)]


def costs(header: str) -> tuple[float, float]:
    """``local=<s>; tier=<s>`` of ``x-mmgate-encode-cost``."""
    fields = dict(part.strip().split("=", 1) for part in header.split(";"))
    return float(fields["local"]), float(fields["tier"])


def example(folder: Path, **decider: object) -> str:
    """examples/e-pd-adaptive.yaml with the decider's parameters overridden, written to ``folder``."""
    doc = yaml.safe_load((EXAMPLES / "e-pd-adaptive.yaml").read_text())
    for plugin in doc["plugins"]:
        if plugin["type"] == "adaptive-encode-decider":
            plugin["parameters"].update(decider)
    path = folder / "e-pd-adaptive.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


async def ask(
    session: aiohttp.ClientSession, url: str, body: bytes, slo_ms: int | None = None
) -> tuple[str, str, float, float]:
    """Send one request in debug mode: where its media were encoded, why, and the costs compared."""
    headers = {"x-mmgate-debug": "1"} | ({"x-slo-ttft-ms": str(slo_ms)} if slo_ms else {})
    async with session.post(url + "/v1/chat/completions", data=body, headers=headers) as r:
        assert r.status == 200
        await r.read()
        outcome, _, reason = r.headers["x-mmgate-encode"].partition("; reason=")
        local, tier = costs(r.headers["x-mmgate-encode-cost"])
    return outcome, reason, local, tier


@pytest.mark.parametrize("mode", MODES)
async def test_one_workloads_requests_go_both_ways_as_their_priced_costs_say(
    mode: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a TTFT SLO, image-light and image-heavy requests interleaved, one at a time: a
    thumbnail costs an idle PD pod less to encode than the hop to an encode pod, four photos
    spread over two encoders cost less than one after another on the PD pod. Every answer says
    where its media were encoded and the two costs compared; each choice is the cheaper one, both
    choices occur, and the pods show both (legs on the encoders, encoder seconds on the PD pod)."""
    caplog.set_level(logging.INFO, logger="mmgate.access")
    seen: list[tuple[str, float, float]] = []
    config = example(tmp_path, ttftSLOSeconds=0)
    async with SimFleet(specs(*E_PD)) as fleet, stack(fleet, mode, config, debug=True) as s:
        model = fleet["pd-0"].model
        async with aiohttp.ClientSession() as session:
            for i in range(6):
                images = heavy(i) if i % 2 else light(i)
                body = chat_body(model, f"request {i}: what is shown?", images, max_tokens=2)
                outcome, reason, local, tier = await ask(session, s.url, body)
                assert reason.startswith("cheaper-")
                seen.append((outcome, local, tier))
                # a few scrapes (every 50 ms), so no pod's scraped queue still shows this request
                # when the next is priced: each is decided on an idle fleet
                await asyncio.sleep(0.25)
        assert {o for o, _, _ in seen} >= {"local", "tier"}
        for outcome, local, tier in seen:
            assert (local <= tier) if outcome == "local" else (tier < local), (outcome, local, tier)
        assert [o for o, _, _ in seen[0::2]] == ["local"] * 3  # the thumbnails
        assert all(o in ("tier", "split") for o, _, _ in seen[1::2])  # the photos
        assert sum(s.encoded("enc-0", "enc-1")) >= 3 * 2  # the photos' legs (split keeps some local)
        assert fleet["pd-0"].metrics.encoder_s > 0  # the thumbnails, encoded where they were served
    logged = [getattr(rec, "fields", {}) for rec in caplog.records if rec.name == "mmgate.access"]
    assert [f["encode"] for f in logged] == [o for o, _, _ in seen]
    for f, (_, local, tier) in zip(logged, seen, strict=True):
        assert f["encode_local_ms"] == pytest.approx(local * 1000, abs=1e-3)
        assert f["encode_tier_ms"] == pytest.approx(tier * 1000, abs=1e-3)
        assert f["predicted_ttft_ms"] > 0
        if f["encode"] == "local":  # predicted with its encoding on the PD pod (not its transfer)
            assert f["predicted_ttft_ms"] > f["encode_local_ms"]


@pytest.mark.parametrize("mode", MODES)
async def test_with_a_ttft_slo_the_tier_takes_media_while_its_predicted_ttft_meets_it(mode: str) -> None:
    """The example's decider with the request's own SLO (``x-slo-ttft-ms``: 1 s), four four-photo
    requests at once on two slow encoders: the first goes to the tier, whose predicted TTFT (its
    prefill on the PD pod, the encoders' queue and its photos, the hop) is within the SLO; the
    tier's queue grows with each, and once its predicted TTFT is past the SLO the next request's
    photos are encoded (some or all) on the PD pod. Each answer's reason and predicted TTFTs
    agree: ``slo-tier`` only with the tier's within the SLO, ``slo-split`` / ``slo-local`` only
    with it past."""
    slo = 1.0
    async with (
        SimFleet(specs(*E_PD, encoder_faults=SLOW_ENCODER)) as fleet,
        stack(fleet, mode, "e-pd-adaptive.yaml", debug=True) as s,
        aiohttp.ClientSession() as session,
    ):
        model = fleet["pd-0"].model
        bodies = [chat_body(model, f"photos {i}", heavy(200 + i), max_tokens=2) for i in range(4)]
        seen = await asyncio.gather(*(ask(session, s.url, b, slo_ms=int(slo * 1000)) for b in bodies))
    outcomes = {outcome for outcome, _, _, _ in seen}
    assert "tier" in outcomes and outcomes & {"local", "split"}, seen
    for outcome, reason, via_pd, via_tier in seen:
        assert reason.startswith("slo-"), seen  # some plan met the SLO every time
        if outcome == "tier":
            assert via_tier <= slo, seen
        else:  # the tier alone would have missed it; what was chosen instead meets it
            assert via_tier > slo, seen
        if outcome == "local":
            assert via_pd <= slo, seen


def tier_signals(text: str) -> dict[str, float]:
    """The encode role's sizing signals from the gateway's /metrics."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("mmgate_tier_") and sample.labels.get("role") == "encode":
                out[sample.name.removeprefix("mmgate_tier_")] = sample.value
    return out


@pytest.mark.parametrize("mode", MODES)
async def test_the_tier_signals_rise_while_encoder_work_queues_and_fall_when_it_drains(
    mode: str, tmp_path: Path
) -> None:
    """Three four-photo requests at once on two slow encoders (about 0.8 s a photo): while their
    legs run, the gateway's /metrics shows the encoder seconds it placed on the encode role and
    asks for more encode pods than the one second of work a pod may hold; once the answers are
    in, both fall back (no work, one pod)."""
    config = example(tmp_path, sizing={"targetSeconds": 0.25})
    async with (
        SimFleet(specs(*E_PD, encoder_faults=SLOW_ENCODER)) as fleet,
        stack(fleet, mode, config) as s,
        aiohttp.ClientSession() as session,
    ):

        async def signals() -> dict[str, float]:
            async with session.get(s.url + "/metrics") as r:
                return tier_signals(await r.text())

        model = fleet["pd-0"].model
        assert (await post(s.url, chat_body(model, "only words", max_tokens=2)))[0] == 200
        idle = await signals()  # the fleet as the decider saw it on that request
        assert idle["encoder_seconds"] == 0 and idle["desired_replicas"] == 1
        sent = [
            asyncio.create_task(post(s.url, chat_body(model, f"photos {i}", heavy(100 + i), max_tokens=2)))
            for i in range(3)
        ]
        peak: dict[str, float] = {}
        while not all(t.done() for t in sent):
            now = await signals()
            if now["encoder_seconds"] > peak.get("encoder_seconds", 0.0):
                peak = now
            await asyncio.sleep(0.05)
        assert [(await t)[0] for t in sent] == [200, 200, 200]
        assert peak["encoder_seconds"] > 0.25  # more than one pod's share placed and not ended
        assert peak["desired_replicas"] >= 2
        assert peak["desired_replicas"] == math.ceil(peak["work_seconds"] / 0.25)
        drained = await signals()
        assert drained["encoder_seconds"] == 0 and drained["desired_replicas"] == 1


@pytest.mark.parametrize("mode", MODES)
async def test_the_encode_pods_work_stops_counting_when_its_legs_end_not_at_the_first_token(
    mode: str, tmp_path: Path
) -> None:
    """A four-photo request whose PD pod is stalled (no first token until the test lets it go):
    the encoder seconds the gateway placed on the encode pods stop counting once their legs have
    answered, while the request still waits for its first token. In gateway mode the gateway
    sees its legs end; behind sidecars each sidecar says so in a 103 (``x-mmgate-stage-done``).
    Counting them until the first token would charge the decode pod's own queue to the encode
    pods, and the adaptive decider would see a busy tier where an idle one is."""
    config = example(tmp_path)
    async with (
        SimFleet(specs(*E_PD)) as fleet,
        stack(fleet, mode, config) as s,
        aiohttp.ClientSession() as session,
    ):

        async def metrics() -> str:
            async with session.get(s.url + "/metrics") as r:
                return await r.text()

        async def stall(on: bool) -> None:
            async with session.post(fleet["pd-0"].url + "/admin/faults", json={"stalled": on}) as r:
                assert r.status == 200, await r.text()

        model = fleet["pd-0"].model
        await stall(True)
        sent = asyncio.create_task(post(s.url, chat_body(model, "photos", heavy(300), max_tokens=2)))
        placed = False
        async with asyncio.timeout(20):
            while True:  # until its tier work is placed and has stopped counting
                text = await metrics()
                placed = placed or 'mmgate_encode_decisions_total{outcome="tier"' in text
                if placed and tier_signals(text)["encoder_seconds"] == 0:
                    break
                await asyncio.sleep(0.05)
        assert sum(s.encoded("enc-0", "enc-1")) == 4  # every photo's leg ran on the encode pods
        assert not sent.done()  # and the request still waits for its first token
        await stall(False)
        assert (await sent)[0] == 200
