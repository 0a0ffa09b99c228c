"""Model folders for engine-exact token tests, built offline with the example's builder
(``examples/tokenizer/make_tokenizer.py``: a small byte-level BPE, Qwen-VL's special tokens and a
ChatML template in Qwen-VL's style), plus a LLaVA-style one whose template takes content as one
string (``USER: <image>\\n...``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from support.processes import REPO


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_tokenizer", REPO / "examples/tokenizer/make_tokenizer.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = _example()
QWEN_TOKENS: tuple[str, ...] = EXAMPLE.QWEN_TOKENS
QWEN_TEMPLATE: str = EXAMPLE.QWEN_TEMPLATE

# LLaVA-1.5's form; content arrives as one string ("string" content format, placeholders in front).
LLAVA_TEMPLATE = """\
{{ bos_token }}{% for message in messages %}
{%- if message['role'] == 'user' %}USER: {{ message['content'] }}
{% elif message['role'] == 'assistant' %}ASSISTANT: {{ message['content'] }}{{ eos_token }}
{% else %}{{ message['content'] }}
{% endif %}{% endfor %}
{%- if add_generation_prompt %}ASSISTANT:{% endif %}"""


def model_dir(
    folder: Path,
    *,
    special: tuple[str, ...] = QWEN_TOKENS,
    template: str | None = QWEN_TEMPLATE,
    template_file: bool = False,
    bos: str = "<|endoftext|>",
) -> Path:
    """A folder with tokenizer.json (``special`` tokens added) and tokenizer_config.json, the chat
    template in the config or (``template_file``) in chat_template.jinja."""
    EXAMPLE.build(folder, vocab_size=1024, special=special, chat_template=None if template_file else template)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["bos_token"] = bos
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    if template is not None and template_file:
        (folder / "chat_template.jinja").write_text(template)
    return folder


def llava_dir(folder: Path) -> Path:
    return model_dir(folder, special=("<s>", "<image>"), template=LLAVA_TEMPLATE, bos="<s>")
