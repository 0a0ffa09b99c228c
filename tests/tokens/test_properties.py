"""Properties of price() and build_sequence() over arbitrary requests (hypothesis)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from mmgate.errors import RequestError
from mmgate.request.view import Api, MediaAsset, Modality, RequestView, Source
from mmgate.tokens import FAMILIES, PricingConfig, build_sequence, price, price_stream

CONFIGS = [PricingConfig(family=name) for name in FAMILIES] + [
    PricingConfig(family=None, provider="anthropic"),
    PricingConfig(family=None, provider="gemini"),
]

side = st.one_of(st.none(), st.integers(min_value=-5, max_value=70_000))
asset = st.builds(
    MediaAsset,
    modality=st.sampled_from(list(Modality)),
    source=st.sampled_from(list(Source)),
    identity=st.text(min_size=1, max_size=12),
    field=st.just("messages[0].content[0]"),
    width=side,
    height=side,
    duration_s=st.one_of(st.none(), st.floats(min_value=-1, max_value=90_000, allow_nan=False)),
    fps=st.one_of(st.none(), st.floats(min_value=0.1, max_value=240)),
)
parts = st.lists(st.one_of(st.text(max_size=40), asset), max_size=6)


@settings(max_examples=100, deadline=None)
@given(parts=parts, cfg=st.sampled_from(CONFIGS))
def test_price_either_succeeds_consistently_or_refuses_with_a_request_error(
    parts: list[str | MediaAsset], cfg: PricingConfig
) -> None:
    view = RequestView(Api.CHAT, "m", parts)
    try:
        pricing = price(view, cfg)
    except RequestError as exc:
        assert exc.status == 400
        assert exc.param == "messages[0].content[0]" or (exc.param == "messages" and "tokens" in exc.message)
        return
    assert len(pricing.assets) == len(view.assets)
    assert all(a.tokens >= 0 and a.extra_tokens >= 0 for a in pricing.assets)
    assert pricing.total_tokens == pricing.text_tokens + sum(a.total for a in pricing.assets)
    seq = build_sequence(view, pricing)
    assert len(seq.token_ids) == pricing.total_tokens
    assert all(0 <= t < 2**32 for t in seq.token_ids)
    for item, a in zip(seq.mm_items, pricing.assets, strict=True):
        assert item.length == a.total and item.offset + item.length <= len(seq.token_ids)


@settings(max_examples=100, deadline=None)
@given(parts=parts, cfg=st.sampled_from(CONFIGS))
def test_the_byte_stream_is_the_sequence_packed(parts: list[str | MediaAsset], cfg: PricingConfig) -> None:
    """price_stream (what the scheduler hashes) prices as price() does and lays out exactly
    build_sequence as little-endian uint32s; it refuses what price() refuses, with its message."""
    view = RequestView(Api.CHAT, "m", parts)
    try:
        pricing = price(view, cfg)
    except RequestError as exc:
        try:
            price_stream(view, cfg)
        except RequestError as again:
            assert (again.message, again.param) == (exc.message, exc.param)
        else:
            raise AssertionError("price_stream priced what price refused") from None
        return
    seq = build_sequence(view, pricing)
    streamed, stream = price_stream(view, cfg)
    assert streamed == pricing
    # struct packs in C: a large video's millions of ids took minutes per example as Python ints.
    assert stream.data == struct.pack(f"<{len(seq.token_ids)}I", *seq.token_ids)
    assert list(stream.token_ids) == seq.token_ids and len(stream) == len(seq)
    assert stream.mm_items == seq.mm_items


def test_the_estimate_counts_utf8_bytes_for_any_text() -> None:
    view = RequestView(
        Api.CHAT, "m", ["héllo wörld ✓", MediaAsset(Modality.IMAGE, Source.URL, "i", "f"), "abcde"]
    )
    pricing = price(view, PricingConfig(family=None, provider="anthropic"))
    assert pricing.text_tokens == -(-len("héllo wörld ✓".encode()) // 4) + 2
    assert pricing.text_tokens == len(build_sequence(view, pricing)) - pricing.assets[0].total
