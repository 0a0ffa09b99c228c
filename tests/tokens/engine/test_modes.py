"""Which served model gets which ids."""

from __future__ import annotations

from pathlib import Path

from mmgate.tokens.engine import TokenMode, TokenModes
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
    assert modes.engine_models == ("Qwen/*", "Qwen/Qwen2.5-VL-7B-Instruct")


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
