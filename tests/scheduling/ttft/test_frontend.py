"""Front-end seconds priced per media item, and one pod's front-end backlog draining with time
and released by first tokens."""

from __future__ import annotations

import pytest

from mmgate.request.view import MediaAsset, Modality, Source
from mmgate.scheduling.ttft.frontend import DEFAULT_FRONTEND, FrontendPricer, FrontendQueue, FrontendRates
from mmgate.tokens.sequence import MMItem

MIB = 1 << 20


def asset(modality: Modality, identity: str, source: Source = Source.INLINE, **kw: object) -> MediaAsset:
    return MediaAsset(modality, source, identity, "messages[0].content[0]", **kw)  # type: ignore[arg-type]


def item(modality: Modality, identity: str, tokens: int) -> MMItem:
    return MMItem(identity, modality, 0, tokens)


def test_each_modality_is_priced_by_what_its_front_end_work_grows_with() -> None:
    pricer = FrontendPricer(
        {
            "image": FrontendRates(
                itemSeconds=0.002, tokenSeconds=1e-5, mibSeconds=0.001, megapixelSeconds=0.006
            ),
            "video": FrontendRates(itemSeconds=0.002, tokenSeconds=7e-5),
            "audio": FrontendRates(itemSeconds=0.05),
        }
    )
    photo = asset(Modality.IMAGE, "p", width=2000, height=1000, payload_size=2 * MIB)
    assert pricer.seconds([photo], [item(Modality.IMAGE, "p", 2000)]) == pytest.approx(
        0.002 + 2000 * 1e-5 + 2 * 0.001 + 2 * 0.006
    )
    clip = asset(Modality.VIDEO, "v", source=Source.URL, width=854, height=480)
    assert pricer.seconds([clip], [item(Modality.VIDEO, "v", 6000)]) == pytest.approx(0.002 + 0.42)
    # audio is padded to one window: a 5-s clip costs what a 60-s one does
    short, long = asset(Modality.AUDIO, "a5"), asset(Modality.AUDIO, "a60")
    assert pricer.seconds([short], [item(Modality.AUDIO, "a5", 125)]) == pricer.seconds(
        [long], [item(Modality.AUDIO, "a60", 1500)]
    )


def test_parts_with_nothing_to_load_and_unpriced_modalities_cost_nothing() -> None:
    pricer = FrontendPricer(DEFAULT_FRONTEND)
    cached = asset(Modality.IMAGE, "u", source=Source.UUID, width=1280, height=720)
    embeds = asset(Modality.EMBEDS, "e", payload_size=MIB)
    assert pricer.seconds([cached, embeds], [item(Modality.EMBEDS, "e", 500)]) == 0.0
    # a URL's payload is not in the body: only its item and decode are charged, not bytes
    url = asset(Modality.IMAGE, "w", source=Source.URL, width=1000, height=1000, payload_size=10 * MIB)
    inline = asset(Modality.IMAGE, "i", width=1000, height=1000, payload_size=10 * MIB)
    assert pricer.seconds([url], []) < pricer.seconds([inline], [])
    assert not FrontendPricer({}).enabled
    assert FrontendPricer({}).seconds([inline], [item(Modality.IMAGE, "i", 900)]) == 0.0


def test_the_defaults_are_the_simulators_omni_front_end() -> None:
    """A 10-s 480p clip (Qwen2.5-VL's video rule: 2 frames a token pair, 3,060 tokens at 2 fps
    here) costs some 0.2 s on the front end, an audio clip 50 ms, a 720p JPEG about 13 ms."""
    pricer = FrontendPricer(DEFAULT_FRONTEND)
    clip = asset(Modality.VIDEO, "v", payload_size=2 * MIB)
    assert 0.2 < pricer.seconds([clip], [item(Modality.VIDEO, "v", 3060)]) < 0.25
    audio = asset(Modality.AUDIO, "a", payload_size=MIB)
    assert pricer.seconds([audio], [item(Modality.AUDIO, "a", 750)]) == pytest.approx(0.051, abs=1e-3)
    photo = asset(Modality.IMAGE, "p", width=1280, height=720, payload_size=270_000)
    assert 0.010 < pricer.seconds([photo], [item(Modality.IMAGE, "p", 1198)]) < 0.016


@pytest.mark.parametrize(
    ("rates", "message"),
    [
        ({"smell": FrontendRates(itemSeconds=1.0)}, "unknown modality 'smell'"),
        ({"video": FrontendRates(tokenSeconds=-1.0)}, "frontEnd.video.tokenSeconds must be >= 0"),
    ],
)
def test_bad_rates_are_refused(rates: dict[str, FrontendRates], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FrontendPricer(rates)


def test_a_backlog_drains_with_time_in_arrival_order() -> None:
    q = FrontendQueue()
    assert q.backlog(0.0) == 0.0
    q.place(0.4, 10.0)  # a clip
    q.place(0.05, 10.1)  # an audio clip behind it: through at 10.45
    assert q.backlog(10.1) == pytest.approx(0.35)
    assert q.backlog(10.4) == pytest.approx(0.05)
    assert q.backlog(11.0) == 0.0
    q.place(0.1, 20.0)  # an idle front end starts the new work at once
    assert q.backlog(20.0) == pytest.approx(0.1)


def test_a_first_token_releases_what_the_clock_still_believes_busy() -> None:
    """The front end was faster than priced: the clip's first token came while the clock still
    counts 0.3 s of its decode, so the backlog is what is still held (the audio clip behind it)."""
    q = FrontendQueue()
    q.place(0.4, 0.0)
    q.place(0.05, 0.0)
    q.release(0.4)  # the clip's first token at t = 0.1
    assert q.backlog(0.1) == pytest.approx(0.05)
    q.release(0.05)
    assert q.backlog(0.1) == 0.0
    q.release(0.05)  # a late release never makes the backlog negative
    assert q.backlog(0.1) == 0.0 and q.held == 0.0
