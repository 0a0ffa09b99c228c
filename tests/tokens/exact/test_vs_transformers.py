"""Engine-exact ids against transformers' ``apply_chat_template`` on the same model folder, with
each placeholder then repeated by the processor's count (written out here, independently)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from mmgate.request import parse_request
from mmgate.tokens import PricingConfig, price
from mmgate.tokens.exact.tokenizer import EngineTokenizer, load_engine_tokenizer
from mmgate.tokens.sequence import TokenSequence
from support.stack import data_url, png
from support.tokenizer_dir import llava_dir, model_dir

transformers = pytest.importorskip("transformers")

QWEN = "Qwen/Qwen2.5-VL-7B-Instruct"
QWEN_448_TOKENS = 256  # 448x448: a 32x32 grid of 14-px patches merged 2x2
LLAVA_TOKENS = 576  # one 336-px CLIP view: 24x24 patches


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_dir(tmp_path_factory.mktemp("qwen"))


def reference(folder: Path, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
    ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
    return list(ids)


def expanded(ids: list[int], token: int, count: int) -> list[int]:
    out: list[int] = []
    for i in ids:
        out.extend([i] * count if i == token else [i])
    return out


def ours(folder: Path, body: dict[str, Any], family: str) -> TokenSequence:
    data = orjson.dumps(body)
    view = parse_request(data, {})
    pricing = price(view, PricingConfig(family=family))
    seq = load_engine_tokenizer(folder).sequence(view, pricing, family)
    assert seq is not None
    return seq


def pad_id(folder: Path, token: str) -> int:
    tok = load_engine_tokenizer(folder)
    assert isinstance(tok, EngineTokenizer)
    return tok.encode(token, add_special_tokens=False)[0]


def test_text_chat_matches(qwen_dir: Path) -> None:
    messages = [
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "what is this picture"},
        {"role": "assistant", "content": "a quiet street"},
        {"role": "user", "content": "describe the tram"},
    ]
    seq = ours(qwen_dir, {"model": QWEN, "messages": messages}, "qwen2.5-vl")
    assert seq.token_ids == reference(qwen_dir, messages)
    assert seq.mm_items == []


def test_default_system_prompt_and_content_parts(qwen_dir: Path) -> None:
    parts = [{"type": "text", "text": "the image shows "}, {"type": "text", "text": "a red coat"}]
    seq = ours(qwen_dir, {"model": QWEN, "messages": [{"role": "user", "content": parts}]}, "qwen2.5-vl")
    assert seq.token_ids == reference(qwen_dir, [{"role": "user", "content": parts}])


def test_images_expand_at_their_placeholders(qwen_dir: Path) -> None:
    a, b = data_url(png(1, (448, 448))), data_url(png(2, (448, 448)))
    content = [
        {"type": "text", "text": "compare"},
        {"type": "image_url", "image_url": {"url": a}},
        {"type": "text", "text": "with"},
        {"type": "image_url", "image_url": {"url": b}},
    ]
    body = {"model": QWEN, "messages": [{"role": "user", "content": content}]}
    seq = ours(qwen_dir, body, "qwen2.5-vl")
    template_view = [
        {"type": "text", "text": "compare"},
        {"type": "image"},
        {"type": "text", "text": "with"},
        {"type": "image"},
    ]
    pad = pad_id(qwen_dir, "<|image_pad|>")
    want = expanded(reference(qwen_dir, [{"role": "user", "content": template_view}]), pad, QWEN_448_TOKENS)
    assert seq.token_ids == want
    # Each item is its run of pads, where vLLM puts its placeholder range.
    starts = [i for i, t in enumerate(want) if t == pad and (i == 0 or want[i - 1] != pad)]
    assert [(m.offset, m.length) for m in seq.mm_items] == [(s, QWEN_448_TOKENS) for s in starts]
    view = parse_request(orjson.dumps(body), {})
    assert [m.identity for m in seq.mm_items] == [x.identity for x in view.assets]
    start = pad_id(qwen_dir, "<|vision_start|>")
    assert all(want[s - 1] == start for s in starts)  # the markers stay ordinary template tokens


def test_tools_and_tool_calls_match(qwen_dir: Path) -> None:
    tools = [{"type": "function", "function": {"name": "clock", "description": "time", "parameters": {}}}]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "what time is it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "clock", "arguments": '{"tz": "utc"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ten past four"},
    ]
    seq = ours(qwen_dir, {"model": QWEN, "messages": messages, "tools": tools}, "qwen2.5-vl")
    # vLLM hands templates the arguments as parsed JSON, as transformers recommends.
    as_vllm = [dict(m) for m in messages]
    as_vllm[1] = {
        **messages[1],
        "tool_calls": [
            {**messages[1]["tool_calls"][0], "function": {"name": "clock", "arguments": {"tz": "utc"}}}
        ],
    }
    assert seq.token_ids == reference(qwen_dir, as_vllm, tools=tools)


def test_string_format_family_puts_placeholders_in_front(tmp_path: Path) -> None:
    folder = llava_dir(tmp_path / "llava")
    assert load_engine_tokenizer(folder).template.content_format == "string"
    content = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": data_url(png(3))}},
    ]
    seq = ours(
        folder,
        {"model": "llava-hf/llava-1.5-7b-hf", "messages": [{"role": "user", "content": content}]},
        "llava-1.5",
    )
    # vLLM's string format: the item's placeholder string, a newline, then the text.
    ref = reference(folder, [{"role": "user", "content": "<image>\nwhat is this"}])
    image = pad_id(folder, "<image>")
    assert seq.token_ids == expanded(ref, image, LLAVA_TOKENS)
    assert [(m.offset, m.length) for m in seq.mm_items] == [(ref.index(image), LLAVA_TOKENS)]
