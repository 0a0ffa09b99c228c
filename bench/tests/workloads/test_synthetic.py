"""Workloads are reproducible, have the promised shape, and render real, distinct media."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import pytest
from PIL import Image

from mmgate.request.view import MediaAsset, Modality
from mmgate_bench.workloads import synthetic as wl
from mmgate_bench.workloads.media import MediaCache, audio, encoded_size, image, render, video


def test_shared_prefix_has_the_llm_d_shape() -> None:
    w = wl.shared_prefix(groups=7, prompts_per_group=5)
    assert len(w.items) == 35
    item = w.items[0]
    (msg,) = item.messages
    media = [p for p in msg.parts if not isinstance(p, str)]
    assert [p for p in msg.parts[:3]] == media  # three images before the text
    assert all((m.width, m.height) == (1280, 720) for m in media)
    assert item.output_tokens == 300
    assert item.text_tokens == pytest.approx(100 + 1200, abs=3)
    # The group shares images and system prompt; questions differ.
    same_group = [i for i in w.items if i.group == item.group]
    assert len(same_group) == 5
    assert {tuple(m.key for m in i.media) for i in same_group} == {tuple(m.key for m in item.media)}
    texts = [t for i in same_group if isinstance(t := i.messages[0].parts[-1], str)]
    assert len(set(texts)) == 5
    assert len({t[: 100 * 4] for t in texts}) == 1  # identical system prompt
    other = next(i for i in w.items if i.group != item.group)
    assert set(m.key for m in other.media).isdisjoint(m.key for m in item.media)


def test_every_count_is_a_parameter() -> None:
    w = wl.shared_prefix(groups=2, prompts_per_group=3, system_tokens=10, question_tokens=20, images=1,
                         width=320, height=200, output_tokens=7)  # fmt: skip
    assert len(w.items) == 6
    assert all(len(i.media) == 1 and i.output_tokens == 7 for i in w.items)
    assert w.items[0].text_tokens == pytest.approx(30, abs=2)
    assert w.params["groups"] == 2 and w.params["images"] == 1


@pytest.mark.parametrize("name", sorted(wl.GENERATORS))
def test_workloads_are_reproducible(name: str) -> None:
    small = {"shared-prefix": {"groups": 4}, "image-reuse": {"requests": 50}, "mixed": {"requests": 40},
             "multi-turn-document": {"conversations": 3}}.get(name, {"requests": 20})  # fmt: skip
    a, b = wl.build(name, seed=3, **small), wl.build(name, seed=3, **small)
    c = wl.build(name, seed=4, **small)
    assert a.items == b.items
    assert a.take(30) == b.take(30)
    assert a.items != c.items


def test_image_reuse_is_zipf_popular_without_shared_text_prefix() -> None:
    w = wl.image_reuse(pool=50, requests=2000)
    counts: dict[str, int] = {}
    for item in w.items:
        (spec,) = item.media
        counts[spec.key] = counts.get(spec.key, 0) + 1
        assert isinstance(item.messages[0].parts[0], str)  # question before the image
    ranked = sorted(counts.values(), reverse=True)
    assert ranked[0] > 5 * ranked[len(ranked) // 2]  # a popular head and a long tail
    prefixes = {i.messages[0].parts[0][:40] for i in w.items}  # type: ignore[index]
    assert len(prefixes) > 1990


def test_image_heavy_is_cold_unless_given_a_catalogue_to_reuse() -> None:
    cold = wl.image_heavy(requests=50)
    assert cold.distinct_media() == 200  # four photos a request, each its own
    reuse = wl.image_heavy(requests=50, pool=30)
    keys = [tuple(m.key for m in item.media) for item in reuse.items]
    assert all(len(set(k)) == 4 for k in keys)  # four different photos in each request ...
    assert reuse.distinct_media() <= 30 < 200  # ... drawn from the catalogue, so photos repeat
    first = [k[0] for k in keys]
    assert max(first.count(key) for key in set(first)) > 1
    assert [i.text_tokens for i in reuse.items] == [i.text_tokens for i in cold.items]  # same questions
    with pytest.raises(ValueError, match="cannot give a request 4 different"):
        wl.image_heavy(requests=1, pool=3)


def test_multi_turn_document_grows_the_history_around_one_page() -> None:
    w = wl.multi_turn_document(conversations=2, turns=3)
    convo = [i for i in w.items if i.group == "doc0"]
    assert [len(i.messages) for i in convo] == [1, 3, 5]
    assert all([m.key for m in i.media] == [convo[0].media[0].key] for i in convo)
    assert convo[2].messages[:3] == convo[1].messages
    assert (convo[0].media[0].width, convo[0].media[0].height) == (1344, 896)
    assert w.items[0].group == "doc0" and w.items[1].group == "doc1"  # conversations interleave


def test_mixed_spans_text_only_to_many_images() -> None:
    w = wl.mixed(requests=300)
    counts = [len(i.media) for i in w.items]
    assert 0 in counts and max(counts) == 8
    sizes = {(m.width, m.height) for i in w.items for m in i.media}
    assert len(sizes) >= 5


def test_mixed_av_blends_every_modality_in_its_fractions() -> None:
    w = wl.mixed_av(requests=2000)
    kinds: dict[str, int] = {}
    for item in w.items:
        media = item.media
        kind = media[0].modality if media else "text"
        assert all(m.modality == kind for m in media) and (kind == "image" or len(media) <= 1)
        kinds[kind] = kinds.get(kind, 0) + 1
    expected = {"text": 0.25, "video": 0.15, "audio": 0.2, "image": 0.4}
    assert set(kinds) == set(expected)
    for kind, share in expected.items():
        assert kinds[kind] / 2000 == pytest.approx(share, abs=0.03), kind
    clips = [m for i in w.items for m in i.media if m.modality == "video"]
    assert {(m.width, m.height) for m in clips} == {(640, 360), (854, 480)}
    assert all(4.0 <= m.duration_s <= 12.0 for m in clips)
    assert all(5.0 <= m.duration_s <= 60.0 for i in w.items for m in i.media if m.modality == "audio")
    with pytest.raises(ValueError, match="sum to at most 1"):
        wl.mixed_av(requests=10, video_fraction=0.5, audio_fraction=0.5)


def test_view_matches_the_body() -> None:
    item = wl.shared_prefix(groups=1, prompts_per_group=1).items[0]
    view = item.view()
    assets = view.assets
    assert [a.identity for a in assets] == [wl.identity_of(m.key) for m in item.media]
    assert all(isinstance(a, MediaAsset) and a.width == 1280 and a.probed for a in assets)
    assert view.max_tokens == 300
    body = item.body(MediaCache())
    parts = body["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url"] * 3 + ["text"]
    assert body["stream"] is True and body["max_tokens"] == 300


def test_images_are_real_distinct_and_do_not_compress_to_nothing() -> None:
    a, b = image("a", 1280, 720), image("b", 1280, 720)
    ra, rb = render(a), render(b)
    assert ra == render(a)
    assert ra != rb
    decoded = Image.open(io.BytesIO(ra))
    assert decoded.format == "JPEG" and decoded.size == (1280, 720)
    assert len(ra) > 50_000


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_views_size_inline_payloads_like_the_bodies_they_stand_for(fmt: str) -> None:
    """The DES never renders media, yet charges base64 decode and hashing by payload size."""
    for w, h in ((336, 224), (1280, 720), (1600, 1200)):
        spec = image(f"size-{fmt}-{w}", w, h, fmt)
        assert encoded_size(spec) == pytest.approx(len(render(spec)), rel=0.35)
    clip = audio("clip", 2.0)
    assert encoded_size(clip) == len(render(clip))
    film = video("film", 640, 360, 3.0)
    assert encoded_size(film) == pytest.approx(len(render(film)), rel=0.05)
    item = wl.shared_prefix(groups=1, prompts_per_group=1).items[0]
    body = json.dumps(item.body(MediaCache()))
    sent = body.split("base64,")[1].split('"')[0]
    assert item.view().assets[0].payload_size == pytest.approx(len(sent), rel=0.35)


def test_audio_and_video_have_real_headers() -> None:
    wav = render(audio("x", 2.0))
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE"
    mp4 = render(video("v", 640, 360, 3.0))
    assert mp4[4:8] == b"ftyp" and b"moov" in mp4[:400] and b"mdat" in mp4
    w = wl.video_reuse(requests=10)
    assert all(m.modality is Modality.VIDEO for i in w.items for m in i.media)


def test_media_cache_renders_each_asset_once() -> None:
    cache = MediaCache(capacity=4)
    w = wl.shared_prefix(groups=1, prompts_per_group=3, width=64, height=48)
    for item in w.items:
        item.body(cache)
    assert cache.rendered == 3


def test_jsonl_round_trip(tmp_path: Path) -> None:
    w = wl.image_reuse(pool=3, requests=5)
    path = tmp_path / "w.jsonl"
    assert wl.export_jsonl(w, path, model="m") == 5
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[0])["model"] == "m"
    items = wl.load_jsonl(path)
    assert [i.output_tokens for i in items] == [300] * 5
    assert items[0].body_bytes() == lines[0].encode()


def test_unknown_workload_and_parameter_are_errors() -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        wl.build("nope")
    with pytest.raises(TypeError):
        wl.build("image-reuse", groups=3)


def test_inference_perf_order_cycles_one_shuffled_prompt_list() -> None:
    own = wl.shared_prefix(groups=4, prompts_per_group=3)
    shuffled = wl.in_prompt_order(own, "inference-perf", seed=1)
    n = len(own.items)
    assert sorted(i.id for i in shuffled.items) == sorted(i.id for i in own.items)
    assert [i.id for i in shuffled.items] != [i.id for i in own.items]
    drawn = [i.id for i in shuffled.take(3 * n)]
    assert drawn == [i.id for i in shuffled.items] * 3  # every prompt once per pass, same order
    assert [i.id for i in wl.in_prompt_order(own, "inference-perf", seed=1).items] == drawn[:n]
    assert shuffled.params["prompt_order"] == "inference-perf"
    assert wl.in_prompt_order(own, "mmgate") is own
    with pytest.raises(ValueError, match="inference-perf"):
        wl.in_prompt_order(own, "sorted")


def test_image_mixed_interleaves_light_and_heavy_requests() -> None:
    w = wl.image_mixed(requests=200, heavy_fraction=0.25, seed=3)
    kinds = [item.id.split("-")[0] for item in w.items]
    assert set(kinds) == {"ih", "il"} and 30 <= kinds.count("ih") <= 70  # about a quarter heavy
    switches = sum(a != b for a, b in itertools.pairwise(kinds))
    assert switches > 40  # interleaved request by request, not in two blocks
    assert [i.id for i in wl.image_mixed(requests=200, heavy_fraction=0.25, seed=3).items] == [
        i.id for i in w.items
    ]
    with pytest.raises(ValueError, match="heavy_fraction"):
        wl.image_mixed(heavy_fraction=1.5)
