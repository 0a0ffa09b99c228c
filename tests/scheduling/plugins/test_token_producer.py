"""token-producer: prices with mmgate.tokens and publishes the pseudo-token stream."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from mmgate.config import ConfigError, parse_config
from mmgate.request import parse_request
from mmgate.request.view import MediaAsset
from mmgate.scheduling import SchedulingRequest, build_scheduler
from mmgate.scheduling.keys import TOKENIZED_PROMPT, TokenizedPrompt
from mmgate.scheduling.plugins.token_producer import TokenProducer
from mmgate.tokens.exact.tokenizer import load_engine_tokenizer
from support.scheduling import endpoints, image, request, scheduler
from support.tokenizer_dir import model_dir

ESTIMATE = {"estimate": {"image": {"mode": "dynamic", "dynamic": {"factor": 1024}}}}


def produce(params: dict[str, object] | None, *parts: str | MediaAsset) -> TokenizedPrompt:
    s = scheduler([{"type": "token-producer", "parameters": params}, {"type": "random-picker"}])
    req = request(*parts)
    s.schedule(req, endpoints(1), 0.0)
    tp = req.get(TOKENIZED_PROMPT)
    assert tp is not None
    return tp


def test_estimate_prices_a_720p_image_at_900_tokens() -> None:
    tp = produce(ESTIMATE, "describe ", image("a" * 32), " please")
    (item,) = tp.media
    assert item.identity == "a" * 32
    assert item.length == 900
    assert tp.media_tokens == 900
    assert tp.total_tokens > 900
    span = tp.token_ids[item.offset : item.offset + item.length]
    assert len(set(span)) == 1  # one identity-derived id repeated


def test_different_images_give_different_streams_same_length() -> None:
    a = produce(ESTIMATE, "x", image("a" * 32))
    b = produce(ESTIMATE, "x", image("b" * 32))
    assert len(a.token_ids) == len(b.token_ids)
    assert a.token_ids != b.token_ids


def test_family_option_prices_by_model_family() -> None:
    est = produce(ESTIMATE, image("a" * 32, 1280, 720))
    fam = produce({"family": "qwen2-vl"}, image("a" * 32, 1280, 720))
    assert fam.pricing is not None
    assert fam.media_tokens != est.media_tokens


def test_mmgate_section_family_is_the_default() -> None:
    cfg = parse_config(
        {"plugins": [{"type": "token-producer"}], "mmgate": {"pricing": {"family": "qwen2-vl"}}}
    )
    s = build_scheduler(cfg.picker, mmgate=cfg.mmgate)
    producer = s.plugins["token-producer"]
    assert isinstance(producer, TokenProducer)
    assert producer.pricing.for_model("any").family == "qwen2-vl"


def test_tokenizer_alias_and_auto_creation() -> None:
    s = scheduler([{"type": "tokenizer"}])
    assert isinstance(s.plugins["tokenizer"], TokenProducer)
    s = scheduler([{"type": "token-load-scorer"}])
    assert "token-producer" in s.plugins


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"vllm": {"url": "http://x"}}, "not supported"),
        ({"family": "qwen2-vl", "estimate": {}}, "only one"),
        ({"familyParams": {"a": 1}}, "familyParams needs family"),
        ({"estimate": {"image": {"mode": "dinamic"}}}, "plugins[0].parameters.estimate.image.mode"),
    ],
)
def test_bad_parameters(params: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        scheduler([{"type": "token-producer", "parameters": params}])
    assert message in str(err.value)


# --- tokens: pseudo or engine-exact ids per served model ------------------------------------------

QWEN = "Qwen/Qwen2.5-VL-7B-Instruct"


def chat_request(model: str, text: str) -> SchedulingRequest:
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": text}]})
    return SchedulingRequest(parse_request(body, {}), "r")


def test_engine_mode_publishes_the_models_own_ids(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "qwen")
    tokens = [{"model": "Qwen/*", "mode": "engine", "tokenizerDir": str(folder)}]
    s = scheduler([{"type": "token-producer", "parameters": {"tokens": tokens}}, {"type": "random-picker"}])
    want = load_engine_tokenizer(folder).encode(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi there<|im_end|>\n"
        "<|im_start|>assistant\n",
        add_special_tokens=False,
    )
    for model, engine in ((QWEN, True), ("other-model", False)):
        req = chat_request(model, "hi there")
        s.schedule(req, endpoints(1), 0.0)
        tp = req.get(TOKENIZED_PROMPT)
        assert tp is not None
        assert (list(tp.token_ids) == want) is engine
        assert tp.stream is None if engine else tp.stream is not None
        if engine:
            assert tp.total_tokens == len(want)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"mode": "engine"}, "mode engine needs tokenizerDir"),
        ({"mode": "engine", "tokenizerDir": "/nonexistent/model"}, "does not exist"),
        ({"mode": "pseudo", "tokenizerDir": "/x"}, "are read in mode engine only"),
        ({"mode": "exact"}, "mode 'exact' is not one of pseudo, engine"),
    ],
)
def test_engine_mode_without_a_usable_folder_is_a_config_error(entry: dict[str, str], message: str) -> None:
    doc = {"plugins": [{"type": "token-producer", "parameters": {"tokens": [{"model": QWEN, **entry}]}}]}
    with pytest.raises(ConfigError, match=message):
        build_scheduler(parse_config(doc).picker)


def test_engine_mode_checks_the_familys_placeholders(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "plain", special=("<|im_start|>", "<|im_end|>"))
    entry = {"model": QWEN, "mode": "engine", "tokenizerDir": str(folder)}
    doc = {"plugins": [{"type": "token-producer", "parameters": {"exact": {}, "tokens": [entry]}}]}
    with pytest.raises(ConfigError, match=r"no '<\|image_pad\|>' token, the image placeholder of qwen2.5-vl"):
        build_scheduler(parse_config(doc).picker)


def test_a_lora_adapters_request_is_priced_as_its_base_model() -> None:
    """A request naming adapter ``sql`` (listed with parent Qwen3-VL by the pods) gets the base
    model's family: the image's tokens are what the pod counts, not an unknown model's estimate."""
    from mmgate.scheduling import EndpointState, Metrics
    from mmgate.vllm.lora import Adapter, LoraState
    from support.views import view

    base = "Qwen/Qwen3-VL-8B-Instruct"
    s = scheduler([{"type": "token-producer", "parameters": {"exact": {}}}, {"type": "random-picker"}])
    lora = LoraState({"sql": Adapter(base, "/adapters/sql")}, max_loras=1)
    pods = [EndpointState("10.0.0.1:8000", metrics=Metrics(lora=lora))]

    def tokens(model: str, eps: list[EndpointState]) -> int:
        req = SchedulingRequest(view("describe ", image("b" * 32), model=model), "r")
        s.schedule(req, eps, 0.0)
        tp = req.get(TOKENIZED_PROMPT)
        assert tp is not None
        return tp.media_tokens

    assert tokens("sql", pods) == tokens(base, pods) != tokens("sql", endpoints(1))
