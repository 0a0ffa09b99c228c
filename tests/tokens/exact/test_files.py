"""What a model folder must hold, and the message when it does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmgate.tokens.exact.files import ModelFilesError, load_model_files
from support.tokenizer_dir import model_dir


def test_missing_folder_says_to_give_a_local_one(tmp_path: Path) -> None:
    with pytest.raises(ModelFilesError, match=r"does not exist.*never downloads"):
        load_model_files(tmp_path / "nowhere")


def test_no_tokenizer_json(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ModelFilesError, match=r"no tokenizer\.json"):
        load_model_files(tmp_path)


def test_no_chat_template(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "m", template=None)
    with pytest.raises(ModelFilesError, match=r"no chat template: provide chat_template\.jinja"):
        load_model_files(folder)


def test_template_file_wins_and_special_tokens_are_read(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "m", template="{{ bos_token }}jinja", template_file=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "from the config"
    config["eos_token"] = {"content": "<|im_end|>", "special": True}  # a serialised AddedToken
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    files = load_model_files(folder)
    assert files.chat_template == "{{ bos_token }}jinja"
    assert files.template_file.endswith("chat_template.jinja")
    assert files.special_tokens["eos_token"] == "<|im_end|>"
    assert files.special_tokens["bos_token"] == "<|endoftext|>"


def test_named_templates_use_default(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "m", template=None)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "tool_use", "template": "tools"},
        {"name": "default", "template": "plain"},
    ]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_model_files(folder).chat_template == "plain"
    config["chat_template"] = [{"name": "tool_use", "template": "tools"}]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFilesError, match="none is called 'default'"):
        load_model_files(folder)


def test_malformed_config_is_named(tmp_path: Path) -> None:
    folder = model_dir(tmp_path / "m")
    (folder / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ModelFilesError, match=r"cannot read .*tokenizer_config\.json"):
        load_model_files(folder)
