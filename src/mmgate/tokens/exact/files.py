"""A served model's tokenizer files, read once from a local directory (never downloaded).

vLLM tokenizes a chat request with the model's ``tokenizer.json`` (Hugging Face ``tokenizers``)
after rendering the model's chat template. Transformers and vLLM look for the template in this
order: ``chat_template.jinja`` (the file recent checkpoints ship), ``chat_template.json`` (a
processor's ``{"chat_template": ...}``), then ``tokenizer_config.json``'s ``chat_template`` (a
string, or a list of ``{name, template}`` of which ``default`` is the one used). The special tokens
a template may print (``bos_token``, ``eos_token``, ...) come from ``tokenizer_config.json``,
spelled either as a string or as a serialised ``AddedToken`` (``{"content": ...}``).

Every problem is a :class:`ModelFilesError` naming the directory and the file to provide, so a
config naming a wrong folder fails at startup with that message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
"""The special-token names transformers hands a chat template (its ``special_tokens_map``)."""


class ModelFilesError(ValueError):
    """A tokenizer directory that cannot give engine-exact token ids; the message says what to add."""


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """What engine-exact tokenization needs from a model directory."""

    directory: str
    tokenizer_json: str  # path of tokenizer.json
    chat_template: str  # the template's source
    template_file: str  # where it came from
    special_tokens: dict[str, Any]  # name -> token text (additional_special_tokens: a list)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFilesError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ModelFilesError(f"{path} must hold a JSON object")
    return data


def _token_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _named_default(templates: list[Any], where: Path) -> str:
    for entry in templates:
        if (
            isinstance(entry, dict)
            and entry.get("name") == "default"
            and isinstance(entry.get("template"), str)
        ):
            return str(entry["template"])
    raise ModelFilesError(f"{where}: chat_template lists named templates but none is called 'default'")


def _template(folder: Path, config: dict[str, Any]) -> tuple[str, str]:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8"), str(jinja)
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelFilesError(f"cannot read {jinja}: {exc}") from None
    processor = folder / "chat_template.json"
    if processor.is_file():
        value = _read_json(processor).get("chat_template")
        if isinstance(value, str) and value.strip():
            return value, str(processor)
    value = config.get("chat_template")
    where = folder / "tokenizer_config.json"
    if isinstance(value, list):
        return _named_default(value, where), str(where)
    if isinstance(value, str) and value.strip():
        return value, str(where)
    raise ModelFilesError(
        f"{folder} has no chat template: provide chat_template.jinja, or a 'chat_template' in "
        "tokenizer_config.json (the files shipped with the served model)"
    )


def _template_file(path: str | Path) -> tuple[str, str]:
    file = Path(path).expanduser()
    try:
        return file.read_text(encoding="utf-8"), str(file)
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFilesError(
            f"cannot read the chat template {str(path)!r} (the file the pods' --chat-template names): {exc}"
        ) from None


def load_model_files(directory: str | Path, chat_template: str | Path | None = None) -> ModelFiles:
    """Read and check ``directory``; raises :class:`ModelFilesError` saying what is missing.

    ``chat_template`` is a template file used instead of the folder's, as vLLM's ``--chat-template``
    replaces the model's."""
    folder = Path(directory).expanduser()
    if not folder.is_dir():
        raise ModelFilesError(
            f"tokenizer directory {str(directory)!r} does not exist: give the local folder holding the "
            "served model's tokenizer.json and chat template (mmgate never downloads them)"
        )
    tokenizer = folder / "tokenizer.json"
    if not tokenizer.is_file():
        raise ModelFilesError(
            f"{folder} has no tokenizer.json: engine-exact tokens need the served model's fast-tokenizer "
            "file (a slow tokenizer's vocab/merges files alone are not read)"
        )
    config_file = folder / "tokenizer_config.json"
    config = _read_json(config_file) if config_file.is_file() else {}
    source, where = _template_file(chat_template) if chat_template else _template(folder, config)
    special: dict[str, Any] = {}
    for key in SPECIAL_TOKEN_KEYS:
        text = _token_text(config.get(key))
        if text is not None:
            special[key] = text
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list):
        special["additional_special_tokens"] = [t for t in map(_token_text, extra) if t is not None]
    return ModelFiles(str(folder), str(tokenizer), source, where, special)
