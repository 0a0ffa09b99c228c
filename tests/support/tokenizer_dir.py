"""Model folders for engine-exact token tests, built offline: the example's small byte-level BPE
(``examples/tokenizer/make_tokenizer.py``) plus a family's special tokens and a chat template
written for these tests in each family's style (Qwen-VL's ChatML with vision markers, LLaVA's
``USER: <image>`` form)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from support.processes import REPO

QWEN_TOKENS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# ChatML with Qwen-VL's vision markers; loops over content parts ("openai" content format).
QWEN_TEMPLATE = """\
{%- if tools %}<|im_start|>system
Tools:
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if loop.first and message['role'] != 'system' and not tools %}<|im_start|>system
You are a helpful assistant.<|im_end|>
{% endif %}
<|im_start|>{{ message['role'] }}
{% if message['content'] is string %}{{ message['content'] }}
{%- else %}{% for part in message['content'] %}
{%- if part['type'] == 'image' or 'image' in part or 'image_url' in part %}
{{- '<|vision_start|><|image_pad|><|vision_end|>' }}
{%- elif part['type'] == 'video' or 'video' in part %}<|vision_start|><|video_pad|><|vision_end|>
{%- elif 'text' in part %}{{ part['text'] }}
{%- endif %}{% endfor %}{% endif %}
{%- for call in message.get('tool_calls', []) %}
{{- '<tool_call>' }}{{ call['function'] | tojson }}{{ '</tool_call>' }}{% endfor %}
<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

# LLaVA-1.5's form; content arrives as one string ("string" content format, placeholders in front).
LLAVA_TEMPLATE = """\
{{ bos_token }}{% for message in messages %}
{%- if message['role'] == 'user' %}USER: {{ message['content'] }}
{% elif message['role'] == 'assistant' %}ASSISTANT: {{ message['content'] }}{{ eos_token }}
{% else %}{{ message['content'] }}
{% endif %}{% endfor %}
{%- if add_generation_prompt %}ASSISTANT:{% endif %}"""


def _example_builder() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_tokenizer", REPO / "examples/tokenizer/make_tokenizer.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build


def model_dir(
    folder: Path,
    *,
    special: tuple[str, ...] = QWEN_TOKENS,
    template: str | None = QWEN_TEMPLATE,
    template_file: bool = False,
    bos: str = "<|endoftext|>",
) -> Path:
    """A folder with tokenizer.json (special tokens added) and tokenizer_config.json, the chat
    template in the config or (``template_file``) in chat_template.jinja."""
    from tokenizers import AddedToken, Tokenizer

    _example_builder()(folder, vocab_size=1024)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tok.save(str(folder / "tokenizer.json"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["bos_token"] = bos
    if template is not None and template_file:
        (folder / "chat_template.jinja").write_text(template)
    elif template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return folder


def llava_dir(folder: Path) -> Path:
    return model_dir(folder, special=("<s>", "<image>"), template=LLAVA_TEMPLATE, bos="<s>")
