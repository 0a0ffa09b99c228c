"""Piece-by-piece encoding equals whole encoding, for the tokenizers where it is used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgate.tokens.exact.segments import SegmentEncoder, piecewise
from support.tokenizer_dir import QWEN_TOKENS, model_dir

tokenizers = pytest.importorskip("tokenizers")

PIECES = st.one_of(
    st.sampled_from(QWEN_TOKENS),
    st.sampled_from(["the image", " shows", "\n", "  ", "user\n", "<|im", "_end|>", "é ü", "1234"]),
    st.text(max_size=12),
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_dir(tmp_path_factory.mktemp("qwen"))


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=30), st.lists(PIECES, max_size=30))
def test_same_ids_as_the_whole_text(folder: Path, first: list[str], second: list[str]) -> None:
    tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    encoder = SegmentEncoder(tok, folder / "tokenizer.json")
    assert encoder.remembers
    for text in ("".join(first), "".join(second), "".join(first + second)):  # later ones reuse pieces
        assert encoder.encode(text) == tok.encode(text, add_special_tokens=False).ids


def rewrite(folder: Path, change: str) -> Path:
    spec = json.loads((folder / "tokenizer.json").read_text())
    if change == "lstrip":
        spec["added_tokens"][-1]["lstrip"] = True
    elif change == "metaspace":
        spec["pre_tokenizer"] = {
            "type": "Metaspace",
            "replacement": "▁",
            "prepend_scheme": "first",
            "split": True,
        }
    elif change == "prepend":
        spec["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}]}
    out = folder / f"tokenizer-{change}.json"
    out.write_text(json.dumps(spec))
    return out


@pytest.mark.parametrize("change", ["lstrip", "metaspace", "prepend"])
def test_tokenizers_that_treat_pieces_differently_are_encoded_whole(folder: Path, change: str) -> None:
    path = rewrite(folder, change)
    assert piecewise(folder / "tokenizer.json")
    assert not piecewise(path)
    tok = tokenizers.Tokenizer.from_file(str(path))
    encoder = SegmentEncoder(tok, path)
    assert not encoder.remembers
    text = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n"
    assert encoder.encode(text) == tok.encode(text, add_special_tokens=False).ids
