"""The reference engine's model side: the tiny Qwen2-VL, loading from disk, prompts and greedy runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mmgate.errors import RequestError
from mmgate.refengine.hf_family import TransformersVLM
from mmgate.refengine.model import TINY_ARCHS, ModelLoadError, load_model, save_tiny, tiny_model
from mmgate.refengine.prompt import prompt_from_messages
from mmgate.refengine.qwen2_vl import Qwen2VL
from mmgate.refengine.runtime import Engine, EngineConfig, GenerateRequest
from mmgate.refengine.vlm import VisionLanguageModel
from mmgate.request import parse_request
from support.bodies import data_uri, image_part
from support.vlm import picture, user_turn

STATELESS = EngineConfig(enable_prefix_caching=False, encoder_cache_tokens=0, processor_cache_bytes=0)


def _first_logits(model: VisionLanguageModel, messages: list[dict[str, object]]) -> torch.Tensor:
    out = Engine(model, STATELESS).generate(
        GenerateRequest("r", prompt_from_messages(messages), max_tokens=1)
    )
    return out[0].logits


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_engine_prefill_is_the_models_own_forward(arch: str) -> None:
    """The engine's piecewise pass (processor, vision tower, embeddings with features written over
    the pads, multimodal rope, the text model) gives the logits transformers' forward gives."""
    tiny = tiny_model(arch)
    messages = [user_turn("describe the image", picture(1), picture(2))]
    engine = Engine(tiny, STATELESS)
    prompt = prompt_from_messages(messages)
    logits = engine.generate(GenerateRequest("r", prompt, max_tokens=1))[0].logits
    assert isinstance(tiny, TransformersVLM)
    hf = tiny.torch_model
    with torch.inference_mode():
        images = [engine.processed(img) for img in prompt.images]
        pairs = [(i.identity, p) for i, p in zip(prompt.images, images, strict=True)]
        layout = tiny.layout(tiny.render(prompt.messages), pairs)
        ids = torch.tensor([layout.token_ids])
        if isinstance(tiny, Qwen2VL):
            pixels = {
                "pixel_values": torch.cat([p.tensors["pixel_values"] for p in images]),
                "image_grid_thw": torch.cat([p.tensors["image_grid_thw"] for p in images]),
                "mm_token_type_ids": (ids == tiny.image_token_id).int(),
            }
        else:  # Idefics3, SmolVLM: every image's tiles as one batch row
            pixels = {
                "pixel_values": torch.cat([p.tensors["pixel_values"] for p in images], dim=1),
                "pixel_attention_mask": torch.cat([p.tensors["pixel_attention_mask"] for p in images], dim=1),
            }
        reference = hf(input_ids=ids, **pixels).logits[0, -1]
    assert [
        int((torch.tensor(layout.token_ids[s.offset : s.offset + s.length]) == tiny.image_token_id).sum())
        for s in layout.spans
    ] == [p.num_tokens for p in images]
    assert torch.allclose(logits, reference, atol=1e-5, rtol=0)
    assert torch.is_inference(logits)  # no autograd anywhere


def test_tiny_model_is_fixed_by_its_seed(tiny: VisionLanguageModel) -> None:
    messages = [user_turn("what is this picture", picture(3))]
    first = _first_logits(tiny, messages)
    assert torch.equal(first, _first_logits(tiny_model(seed=0), messages))
    assert not torch.allclose(first, _first_logits(tiny_model(seed=1), messages))


@pytest.mark.parametrize("arch", ["qwen2-vl", "smolvlm"])
def test_a_saved_model_loads_from_its_directory_alone(tmp_path: Path, arch: str) -> None:
    tiny = tiny_model(arch)
    folder = save_tiny(tmp_path / "tiny", arch)
    loaded = load_model(folder)
    assert loaded.name == "tiny"
    assert loaded.eos_token_ids == tiny.eos_token_ids
    messages = [user_turn("count slowly", picture(4))]
    assert torch.equal(_first_logits(loaded, messages), _first_logits(tiny, messages))


def test_load_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelLoadError, match="'llama' is not supported"):
        load_model(tmp_path)


@pytest.mark.parametrize("arch", ["qwen2-vl", "smolvlm"])
def test_greedy_reply_for_a_chat_with_images(arch: str) -> None:
    tiny = tiny_model(arch)
    messages = [user_turn("describe the image", picture(5)), {"role": "assistant", "content": "a street"}]
    messages.append(user_turn("and this one?", picture(6)))
    request = GenerateRequest("r", prompt_from_messages(messages), max_tokens=40, ignore_eos=True)
    out = Engine(tiny).generate(request)
    again = Engine(tiny).generate(request)
    assert [o.token_id for o in out] == [o.token_id for o in again]
    assert len(out) == 40 and out[-1].finished and out[-1].finish_reason == "length"
    assert [o.completion_tokens for o in out] == list(range(1, 41))
    # the streamed pieces (each decoded from a short window) add up to the whole reply decoded at once
    assert "".join(o.text for o in out) == tiny.detokenize([o.token_id for o in out])


def test_image_identity_is_the_gateways() -> None:
    """The engine names an image exactly as the gateway's request parser does: the part's uuid
    when given, else the hash of the payload as sent."""
    png = picture(7)
    parts = [image_part(data_uri(png)), {**image_part(data_uri(png)), "uuid": "client-id"}]
    body = {"model": "m", "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": "hi"}]}]}
    view = parse_request(json.dumps(body).encode(), {})
    prompt = prompt_from_messages(body["messages"])
    assert [i.identity for i in prompt.images] == [a.identity for a in view.assets]
    assert prompt.images[0].data == png
    assert prompt.messages[0]["content"] == [
        {"type": "image"},
        {"type": "image"},
        {"type": "text", "text": "hi"},
    ]


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (
            [{"role": "user", "content": [image_part("https://example.com/a.png")]}],
            "messages[0].content[0].image_url.url",
        ),
        (
            [{"role": "user", "content": [image_part("data:image/png;base64,@@@@")]}],
            "messages[0].content[0].image_url.url",
        ),
        (
            [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
            "messages[0].content[0]",
        ),
        ([{"role": "robot", "content": "hi"}], "messages[0].role"),
        ([], "messages"),
    ],
)
def test_prompt_mistakes_name_the_field(messages: list[dict[str, object]], param: str) -> None:
    with pytest.raises(RequestError) as err:
        prompt_from_messages(messages)
    assert err.value.status == 400 and err.value.param == param


def test_unreadable_image_bytes_are_a_client_error(tiny: VisionLanguageModel) -> None:
    not_an_image = data_uri(b"definitely not a picture")
    prompt = prompt_from_messages([{"role": "user", "content": [image_part(not_an_image)]}])
    with pytest.raises(RequestError) as err:
        Engine(tiny).add_request(GenerateRequest("r", prompt))
    assert err.value.status == 400 and err.value.param == "messages[0].content[0].image_url.url"


def test_text_that_spells_the_image_placeholder_is_a_client_error(tiny: VisionLanguageModel) -> None:
    prompt = prompt_from_messages([user_turn("what is <|image_pad|> here?", picture(8))])
    with pytest.raises(RequestError) as err:
        Engine(tiny).add_request(GenerateRequest("r", prompt))
    assert err.value.status == 400 and err.value.param == "messages"
