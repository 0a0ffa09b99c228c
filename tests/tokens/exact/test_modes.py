"""Which served model gets which ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgate.tokens.exact import TokenMode, TokenModes
from support.tokenizer_dir import model_dir


def test_exact_id_beats_globs_and_unmatched_is_pseudo(tmp_path: Path) -> None:
    a, b = model_dir(tmp_path / "a"), model_dir(tmp_path / "b")
    modes = TokenModes(
        [
            TokenMode(model="Qwen/*", mode="engine", tokenizerDir=str(a)),
            TokenMode(model="Qwen/Qwen2.5-VL-7B-Instruct", mode="engine", tokenizerDir=str(b)),
            TokenMode(model="Qwen/Qwen3-VL-8B", mode="pseudo"),
        ],
        lambda model: None,
    )
    exact, glob = modes.for_model("Qwen/Qwen2.5-VL-7B-Instruct"), modes.for_model("Qwen/Qwen2-VL-2B")
    assert exact is not None and exact.directory == str(b.resolve())
    assert glob is not None and glob.directory == str(a.resolve())
    assert modes.for_model("Qwen/Qwen3-VL-8B") is None
    assert modes.for_model("qwen/lowercase") is None  # served names are case-sensitive


def test_one_folder_is_loaded_once(tmp_path: Path) -> None:
    a = model_dir(tmp_path / "a")
    modes = TokenModes(
        [
            TokenMode(model="x", mode="engine", tokenizerDir=str(a)),
            TokenMode(model="y", mode="engine", tokenizerDir=str(a)),
        ],
        lambda model: None,
    )
    assert modes.for_model("x") is modes.for_model("y")


def test_the_pods_template_flags_are_followed(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "a")
    override = tmp_path / "served.jinja"
    override.write_text("{% for m in messages %}{{ m['content'] }}|{% endfor %}")
    modes = TokenModes(
        [
            TokenMode(model="a", mode="engine", tokenizerDir=str(folder), chatTemplate=str(override)),
            TokenMode(model="b", mode="engine", tokenizerDir=str(folder), contentFormat="string"),
            TokenMode(model="c", mode="engine", tokenizerDir=str(folder)),
        ],
        lambda model: None,
    )
    a, b, c = (modes.for_model(m) for m in "abc")
    assert a is not None and a.template.render([{"role": "user", "content": "hi"}]) == "hi|"
    assert b is not None and b.template.content_format == "string"
    assert c is not None and c.template.content_format == "openai"  # detected from the folder's template


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"chatTemplate": "/nonexistent/t.jinja"}, "cannot read the chat template"),
        ({"contentFormat": "json"}, "content format 'json' is not one of auto, string, openai"),
    ],
)
def test_bad_template_flags_are_config_errors(tmp_path: Path, entry: dict[str, str], message: str) -> None:
    folder = model_dir(tmp_path / "a")
    with pytest.raises(ValueError, match=message):
        TokenModes(
            [TokenMode(model="x", mode="engine", tokenizerDir=str(folder), **entry)], lambda model: None
        )
