"""Front-end seconds priced per media item in vLLM's two stages (loading threads, then one
processor worker), and one pod's processor backlog draining with time and released by first
tokens."""

from __future__ import annotations

import pytest

from mmgate.request.view import MediaAsset, Modality, Source
from mmgate.scheduling.ttft.frontend import (
    DEFAULT_FRONTEND,
    FrontendPricer,
    FrontendQueue,
    FrontendRates,
    StageRates,
)
from mmgate.tokens.sequence import MMItem

MIB = 1 << 20


def asset(modality: Modality, identity: str, source: Source = Source.INLINE, **kw: object) -> MediaAsset:
    return MediaAsset(modality, source, identity, "messages[0].content[0]", **kw)  # type: ignore[arg-type]


def item(modality: Modality, identity: str, tokens: int) -> MMItem:
    return MMItem(identity, modality, 0, tokens)


PRICER = FrontendPricer(
    {
        "image": FrontendRates(
            load=StageRates(itemSeconds=0.001, mibSeconds=0.001, megapixelSeconds=0.006),
            processor=StageRates(itemSeconds=0.002, tokenSeconds=1e-5),
        ),
        "video": FrontendRates(load=StageRates(tokenSeconds=6e-5), processor=StageRates(tokenSeconds=1e-5)),
        "audio": FrontendRates(processor=StageRates(itemSeconds=0.05)),
    }
)


def test_each_stage_is_priced_by_what_its_work_grows_with() -> None:
    photo = asset(Modality.IMAGE, "p", width=2000, height=1000, payload_size=2 * MIB)
    load, processor, skipped = PRICER.seconds([photo], [item(Modality.IMAGE, "p", 2000)])
    assert load == pytest.approx(0.001 + 2 * 0.001 + 2 * 0.006)  # the part, its bytes, its pixels
    assert processor == pytest.approx(0.002 + 2000 * 1e-5)
    assert skipped == {"p": pytest.approx(processor)}  # no hash priced here: a hit skips it all
    clip = asset(Modality.VIDEO, "v", source=Source.URL, width=854, height=480)
    assert PRICER.seconds([clip], [item(Modality.VIDEO, "v", 6000)])[:2] == pytest.approx((0.36, 0.06))
    # audio is padded to one window: a 5-s clip costs what a 60-s one does
    short, long = asset(Modality.AUDIO, "a5"), asset(Modality.AUDIO, "a60")
    five = PRICER.seconds([short], [item(Modality.AUDIO, "a5", 125)])
    sixty = PRICER.seconds([long], [item(Modality.AUDIO, "a60", 1500)])
    assert five[:2] == sixty[:2]


def test_parts_load_at_once_and_queue_one_after_another_in_the_processor() -> None:
    photos = [asset(Modality.IMAGE, f"p{i}", width=1000, height=1000) for i in range(3)]
    items = [item(Modality.IMAGE, f"p{i}", 1000) for i in range(3)]
    one = PRICER.seconds(photos[:1], items[:1])
    three = PRICER.seconds(photos, items)
    assert three[0] == pytest.approx(one[0])  # on three loading threads
    assert three[1] == pytest.approx(3 * one[1])


def test_parts_with_nothing_to_load_and_unpriced_modalities_cost_nothing() -> None:
    pricer = FrontendPricer(DEFAULT_FRONTEND)
    cached = asset(Modality.IMAGE, "u", source=Source.UUID, width=1280, height=720)
    embeds = asset(Modality.EMBEDS, "e", payload_size=MIB)
    assert pricer.seconds([cached, embeds], [item(Modality.EMBEDS, "e", 500)])[:2] == (0.0, 0.0)
    # a URL's payload is not in the body: its part and decode are charged, not bytes
    url = asset(Modality.IMAGE, "w", source=Source.URL, width=1000, height=1000, payload_size=10 * MIB)
    inline = asset(Modality.IMAGE, "i", width=1000, height=1000, payload_size=10 * MIB)
    assert sum(pricer.seconds([url], [])[:2]) < sum(pricer.seconds([inline], [])[:2])
    assert not FrontendPricer({}).enabled
    assert FrontendPricer({}).seconds([inline], [item(Modality.IMAGE, "i", 900)])[:2] == (0.0, 0.0)


def test_the_defaults_are_the_simulators_omni_front_end() -> None:
    """A 10-s 480p clip (3,060 tokens) decodes in ~0.19 s and takes ~36 ms of the processor, an
    audio clip 50 ms of it, a 720p JPEG about 5 ms of decode and 8 ms of processor."""
    pricer = FrontendPricer(DEFAULT_FRONTEND)
    clip = asset(Modality.VIDEO, "v", payload_size=2 * MIB)
    load, processor, _ = pricer.seconds([clip], [item(Modality.VIDEO, "v", 3060)])
    assert 0.18 < load < 0.2 and 0.03 < processor < 0.04
    audio = asset(Modality.AUDIO, "a", payload_size=MIB)
    assert pricer.seconds([audio], [item(Modality.AUDIO, "a", 750)])[1] == pytest.approx(0.05, abs=1e-3)
    photo = asset(Modality.IMAGE, "p", width=1280, height=720, payload_size=270_000)
    load, processor, skipped = pricer.seconds([photo], [item(Modality.IMAGE, "p", 1198)])
    assert 0.004 < load < 0.007 and 0.007 < processor < 0.010
    assert 0 < processor - skipped["p"] < 1e-4  # a processor-cache hit still hashes the file


@pytest.mark.parametrize(
    ("rates", "message"),
    [
        ({"smell": FrontendRates(load=StageRates(itemSeconds=1.0))}, "unknown modality 'smell'"),
        (
            {"video": FrontendRates(processor=StageRates(tokenSeconds=-1.0))},
            "frontEnd.video.processor.tokenSeconds must be >= 0",
        ),
    ],
)
def test_bad_rates_are_refused(rates: dict[str, FrontendRates], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FrontendPricer(rates)


def test_a_backlog_drains_with_time_in_order() -> None:
    q = FrontendQueue()
    assert q.backlog(0.0) == 0.0
    q.place(0.4, 10.0)  # a spectrogram's worth of processor work or so, loaded at 10.0
    q.place(0.05, 10.1)  # another request behind it: through at 10.45
    assert q.backlog(10.1) == pytest.approx(0.35)
    assert q.backlog(10.4) == pytest.approx(0.05)
    assert q.backlog(11.0) == 0.0
    q.place(0.1, 20.0)  # an idle processor starts the new work once it is loaded
    assert q.backlog(20.0) == pytest.approx(0.1)


def test_a_first_token_before_the_clocks_end_moves_the_rest_up() -> None:
    """The processor was faster than priced: the first request's first token came at 0.1 s
    while the clock expected it through at 0.4 s, so what is behind it is 0.3 s nearer."""
    q = FrontendQueue()
    first = q.place(0.4, 0.0)
    second = q.place(0.05, 0.0)
    assert (first, second) == pytest.approx((0.4, 0.45))
    q.through(first, 0.1)
    assert q.backlog(0.1) == pytest.approx(0.05)
    q.through(second, 0.1)
    assert q.backlog(0.1) == 0.0
    end = q.place(0.3, 1.0)
    q.through(end, 1.5)  # a first token after its end says nothing new ...
    assert q.backlog(1.0) == pytest.approx(0.3)
    q.through(5.0, 1.0)  # ... and one far before it never makes the backlog negative
    assert q.backlog(1.0) == 0.0
