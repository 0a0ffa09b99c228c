"""price(): per-asset rules, defaults, repeats, totals; build_sequence(): layout and determinism."""

from __future__ import annotations

import pytest

from mmgate.errors import RequestError
from mmgate.request.view import Modality
from mmgate.tokens import (
    EstimateConfig,
    PricingConfig,
    UnknownNameError,
    build_sequence,
    get_family,
    parse_estimate,
    price,
    price_stream,
)
from mmgate.tokens.sequence import media_token_id
from support.views import audio, image, video, view


def test_qwen3_prices_probed_image_and_reports_rule() -> None:
    p = price(view("user: look ", image("a", 1280, 720), " please"), PricingConfig(family="qwen3-vl"))
    (a,) = p.assets
    assert (a.tokens, a.extra_tokens, a.rule, a.defaulted) == (880, 2, "qwen3-vl", False)
    assert p.text_tokens == 3 + 2  # "user: look " = 11 bytes -> 3, " please" = 7 bytes -> 2
    assert p.total_tokens == p.text_tokens + 882
    assert p.image_tokens == 882 and p.video_tokens == 0


def test_unprobed_image_gets_default_resolution_and_is_marked() -> None:
    cfg = PricingConfig(family="qwen3-vl", default_image=(1920, 1080))
    (a,) = price(view(image("u")), cfg).assets
    assert a.defaulted and (a.width, a.height) == (1920, 1080)
    assert a.tokens == get_family("qwen3-vl").count_image(1920, 1080).tokens


def test_repeated_asset_is_priced_each_time() -> None:
    same = image("x", 640, 480)
    p = price(view("a", same, "b", same), PricingConfig(family="qwen2-vl"))
    assert len(p.assets) == 2 and p.assets[0] == p.assets[1]
    assert p.image_tokens == 2 * p.assets[0].total


def test_params_override_changes_the_count() -> None:
    small = PricingConfig(family="qwen2-vl", params={"max_pixels": 256 * 28 * 28})
    big = PricingConfig(family="qwen2-vl")
    v = view(image("a", 1920, 1080))
    assert price(v, small).image_tokens < price(v, big).image_tokens
    assert price(v, small).assets[0].tokens <= 256


def test_llmd_estimate_dynamic_static_and_default_resolution() -> None:
    v = view(image("a", 1280, 720), image("b"))
    dyn = price(v, PricingConfig(estimate=EstimateConfig()))
    assert [a.tokens for a in dyn.assets] == [900, 225]  # 1280*720/1024, default 640x360 -> 225
    assert [a.rule for a in dyn.assets] == ["llm-d:dynamic"] * 2
    est = parse_estimate({"image": {"mode": "static", "static": {"staticToken": 77}}})
    assert [a.tokens for a in price(v, PricingConfig(estimate=est)).assets] == [77, 77]


def test_family_without_audio_falls_back_and_says_so() -> None:
    p = price(view(audio("s", 30.0)), PricingConfig(family="qwen3-vl"))
    assert p.assets[0].rule == "llm-d:audio" and p.audio_tokens > 0


def test_absurd_probed_size_is_a_client_error_naming_the_field() -> None:
    with pytest.raises(RequestError) as err:
        price(view(image("a", 100_000, 10)), PricingConfig())
    assert err.value.param == "messages[0].content[a]" and "65535" in err.value.message


def test_a_size_priced_before_as_ints_is_still_refused_as_a_float_or_bool() -> None:
    cfg = PricingConfig(family="qwen3-vl")
    assert price(view(image("a", 1280, 720)), cfg).assets[0].tokens > 0  # now in the count cache
    for w, h in [(1280.0, 720), (1280, True)]:
        with pytest.raises(RequestError, match="must be an integer") as err:
            price(view(image("b", w, h)), cfg)  # type: ignore[arg-type]
        assert err.value.param == "messages[0].content[b]"
    assert price(view(image("c", 1280, 720)), cfg).assets[0].tokens > 0  # the refusal was not cached


def test_price_stream_keeps_a_recurring_images_price_and_never_a_refusal() -> None:
    """Pricing finds an image priced before by (identity, modality, size, detail): the same
    price as price() gives, for every request, while a float or bool size or another size of the
    same identity is priced (or refused) afresh."""
    cfg = PricingConfig(family="qwen3-vl")
    first = price_stream(view("a ", image("a", 1280, 720), " b"), cfg)[0]
    again = price_stream(view("c ", image("a", 1280, 720), " d"), cfg)[0]
    assert first == again == price(view("c ", image("a", 1280, 720), " d"), cfg)
    assert again.assets[0] is first.assets[0]  # kept: frozen, so no request can change it
    with pytest.raises(AttributeError):
        first.assets[0].tokens = 1  # type: ignore[misc]
    for w, h in [(1280.0, 720), (1280, True)]:
        with pytest.raises(RequestError, match="must be an integer"):
            price_stream(view(image("a", w, h)), cfg)  # type: ignore[arg-type]
    other = price_stream(view(image("a", 640, 480)), cfg)[0]
    assert other.assets[0] == price(view(image("a", 640, 480)), cfg).assets[0] != first.assets[0]
    with pytest.raises(RequestError, match="aspect ratio"):
        price_stream(view(image("thin", 5000, 10)), cfg)
    with pytest.raises(RequestError, match="aspect ratio"):  # the refusal was not kept as a price
        price_stream(view(image("thin", 5000, 10)), cfg)


def test_rule_refusal_names_the_part() -> None:
    with pytest.raises(RequestError) as err:
        price(view(image("thin", 5000, 10)), PricingConfig(family="qwen3-vl"))  # 500:1
    assert err.value.param == "messages[0].content[thin]" and "aspect ratio" in err.value.message


def test_absurd_totals_are_refused_before_building_a_sequence() -> None:
    # llm-d's estimate is uncapped by default: a day of 8K video would be billions of tokens.
    v = view(video("day", 7680, 4320, 86_400.0, 30.0))
    with pytest.raises(RequestError, match="more than the 16,777,216") as err:
        price(v, PricingConfig(family=None, estimate=EstimateConfig()))
    assert err.value.param == "messages"
    # The scheduler's one-pass form refuses it the same way, before laying out its billions of ids.
    with pytest.raises(RequestError, match="more than the 16,777,216") as err:
        price_stream(v, PricingConfig(family=None, estimate=EstimateConfig()))
    assert err.value.param == "messages"


def test_unknown_family_lists_valid_ones() -> None:
    with pytest.raises(UnknownNameError, match=r"valid choices: .*qwen3-vl"):
        PricingConfig(family="qwen9-vl")


def test_unknown_param_lists_valid_ones() -> None:
    with pytest.raises(UnknownNameError, match="max_pixels"):
        PricingConfig(family="qwen3-vl", params={"max_pixel": 5})


def test_video_unprobed_uses_defaults() -> None:
    p = price(view(video("v")), PricingConfig(family="qwen3-vl"))
    (a,) = p.assets
    assert a.defaulted and a.modality is Modality.VIDEO and a.duration_s == 10.0 and a.tokens > 0


def test_sequence_layout_matches_pricing() -> None:
    v = view("user: hi", image("img1", 640, 480), "tell me", image("img1", 640, 480))
    p = price(v, PricingConfig(family="qwen2-vl"))
    seq = build_sequence(v, p)
    assert len(seq.token_ids) == p.total_tokens
    first, second = seq.mm_items
    assert first.offset == 2 and first.length == p.assets[0].total  # "user: hi" = 8 bytes = 2 tokens
    assert second.offset == first.offset + first.length + 2  # "tell me" = 7 bytes -> 2 tokens
    assert set(seq.token_ids[first.offset : first.offset + first.length]) == {media_token_id("img1")}
    assert seq.token_ids[0] == int.from_bytes(b"user", "little")


def test_sequence_is_deterministic_and_media_change_is_local() -> None:
    cfg = PricingConfig(family="qwen3-vl")
    a = view("system prompt " * 10, image("cat", 800, 600), "q")
    b = view("system prompt " * 10, image("dog", 800, 600), "q")
    sa, sb = build_sequence(a, price(a, cfg)), build_sequence(b, price(b, cfg))
    assert sa == build_sequence(a, price(a, cfg))
    off = sa.mm_items[0].offset
    assert sa.token_ids[:off] == sb.token_ids[:off] and sa.token_ids[off] != sb.token_ids[off]
    assert len(sa) == len(sb)


def test_sequence_uses_prompt_token_ids() -> None:
    v = view()
    v.prompt_token_ids = [5, 6, 7]
    p = price(v, PricingConfig())
    assert p.text_tokens == 3 and build_sequence(v, p).token_ids == [5, 6, 7]


def test_exact_text_count_with_a_local_tokenizer_json(tmp_path: object) -> None:
    from pathlib import Path

    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "look": 3, "at": 4, "this": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = Path(str(tmp_path)) / "tokenizer.json"
    tok.save(str(path))
    v = view("hello world look at", image("a", 640, 480), "this zebra")
    exact = price(v, PricingConfig(family="qwen3-vl", tokenizer=str(path)))
    assert exact.text_tokens == 4 + 2  # word-level: one token per word, unknown words included
    # The scheduler's one-pass pricing hands the tokenizer the same runs.
    assert price_stream(v, PricingConfig(family="qwen3-vl", tokenizer=str(path)))[0] == exact
    assert price(v, PricingConfig(family="qwen3-vl")).text_tokens == 5 + 3  # bytes/4 per run
    with pytest.raises(ValueError, match="tokenizer file not found"):
        PricingConfig(tokenizer=str(path) + ".missing")
