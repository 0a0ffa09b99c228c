"""What engine mode lays out itself, and what it leaves to the pseudo-token stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from mmgate.request import parse_request
from mmgate.request.view import Api
from mmgate.tokens import PricingConfig, price
from mmgate.tokens.exact.tokenizer import EngineTokenizer, load_engine_tokenizer
from mmgate.tokens.sequence import TokenSequence
from support.stack import data_url, png
from support.tokenizer_dir import model_dir


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> EngineTokenizer:
    return load_engine_tokenizer(model_dir(tmp_path_factory.mktemp("qwen")))


def lay_out(
    tok: EngineTokenizer, body: dict[str, Any], api: Api = Api.CHAT, family: str = "qwen2.5-vl"
) -> TokenSequence | None:
    view = parse_request(orjson.dumps(body), {}, api=api)
    return tok.sequence(view, price(view, PricingConfig(family=family)), family)


def test_completions_prompt_is_encoded_with_special_tokens_as_vllm(tok: EngineTokenizer) -> None:
    seq = lay_out(tok, {"model": "m", "prompt": "the quiet street"}, Api.COMPLETIONS)
    assert seq is not None and seq.token_ids == tok.encode("the quiet street", add_special_tokens=True)
    body = {"model": "m", "prompt": "the quiet street", "add_special_tokens": False}
    plain = lay_out(tok, body, Api.COMPLETIONS)
    assert plain is not None and plain.token_ids == tok.encode("the quiet street", add_special_tokens=False)


def test_the_request_can_ask_for_no_generation_prompt(tok: EngineTokenizer) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with_prompt = lay_out(tok, {"model": "m", "messages": messages})
    without = lay_out(tok, {"model": "m", "messages": messages, "add_generation_prompt": False})
    assert with_prompt is not None and without is not None
    assert with_prompt.token_ids[: len(without.token_ids)] == without.token_ids
    assert len(with_prompt.token_ids) > len(without.token_ids)


@pytest.mark.parametrize(
    ("body", "api", "family"),
    [
        ({"model": "m", "prompt": ["a", "b"]}, Api.COMPLETIONS, "qwen2.5-vl"),  # a batch: one sequence each
        ({"model": "m", "prompt": [1, 2, 3]}, Api.COMPLETIONS, "qwen2.5-vl"),  # token ids are already exact
        (
            {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
            Api.MESSAGES,
            "qwen2.5-vl",
        ),
        # Qwen3-VL video interleaves per-frame timestamps: not modelled
        (
            {
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "video_url", "video_url": {"url": "https://x/v.mp4"}}],
                    }
                ],
            },
            Api.CHAT,
            "qwen3-vl",
        ),
        # a family without a placeholder for images
        (
            {
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": data_url(png(1))}}],
                    }
                ],
            },
            Api.CHAT,
            "gemma3",
        ),
    ],
)
def test_what_keeps_the_pseudo_layout(
    tok: EngineTokenizer, body: dict[str, Any], api: Api, family: str
) -> None:
    assert lay_out(tok, body, api, family) is None


def test_a_template_refusal_keeps_the_pseudo_layout(tmp_path: Path) -> None:
    refusing = load_engine_tokenizer(model_dir(tmp_path / "m", template="{{ raise_exception('no') }}"))
    assert lay_out(refusing, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}) is None


def test_each_modality_is_matched_in_its_own_order(tok: EngineTokenizer) -> None:
    video = {"type": "video_url", "video_url": {"url": "https://x/v.mp4"}}
    image = {"type": "image_url", "image_url": {"url": data_url(png(2, (448, 448)))}}
    seq = lay_out(tok, {"model": "m", "messages": [{"role": "user", "content": [video, image]}]})
    assert seq is not None
    view = parse_request(
        orjson.dumps({"model": "m", "messages": [{"role": "user", "content": [video, image]}]}), {}
    )
    assert [m.identity for m in seq.mm_items] == [a.identity for a in view.assets]
    assert [m.modality.value for m in seq.mm_items] == ["video", "image"]
    assert seq.mm_items[0].offset < seq.mm_items[1].offset


def test_a_template_that_breaks_on_a_conversation_keeps_the_pseudo_layout(tmp_path: Path) -> None:
    # A template doing arithmetic on client text: TypeError inside Jinja, not a 500.
    broken = load_engine_tokenizer(model_dir(tmp_path / "m", template="{{ messages[0]['content'] + 1 }}"))
    assert lay_out(broken, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}) is None


def test_arguments_nested_too_deep_for_json_become_empty(tok: EngineTokenizer) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[" * 100_000}}
    body = {"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}
    assert lay_out(tok, body) is not None
