"""A small tokenizer folder built offline: a byte-level BPE trained on text it makes itself.

Load generators (guidellm, inference-perf, aiperf) insist on a local tokenizer, engine-exact token
tests need real ids, and the reference engine's tiny models need a vocabulary: none of them may
download one. :func:`build` trains a byte-level BPE with the ``tokenizers`` library and writes
``tokenizer.json`` and ``tokenizer_config.json``, which ``AutoTokenizer.from_pretrained(FOLDER)``
loads. With a family's tokens and template (``TEMPLATES``) the folder stands in for that family's
model folder: Qwen-VL's ChatML turns, vision markers and pads, or Idefics3's turns, image markers and
tile tags, and a chat template in the family's style, so placeholders expand as its processor
expands them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

__all__ = [
    "IDEFICS3_TEMPLATE",
    "IDEFICS3_TOKENS",
    "QWEN_TEMPLATE",
    "QWEN_TOKENS",
    "TEMPLATES",
    "build",
    "corpus",
]

_TEXT = (
    "the image shows a quiet street with parked cars and tall trees under a pale sky person red coat "
    "walks past shop window while light rain falls on pavement in distance tram turns corner clock "
    "above station reads ten past four what is this picture describe count slowly answer briefly"
)
WORDS = _TEXT.split()

QWEN_TOKENS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# ChatML with Qwen-VL's vision markers, looping over content parts (vLLM's "openai" content format);
# tools are listed in a system turn and an assistant's tool calls printed as JSON.
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

IDEFICS3_TOKENS = (
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    "<end_of_utterance>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
)

# Idefics3's turns ("User:", "Assistant:", each closed by <end_of_utterance>) with one <image> per image
# part; the processor expands each into its tiles' markers and image tokens.
IDEFICS3_TEMPLATE = """\
{{- bos_token }}{% for message in messages %}{{ message['role'] | capitalize }}:
{%- if message['content'] is string %} {{ message['content'] }}
{%- else %}{% for part in message['content'] %}
{%- if part['type'] == 'image' %}<image>{% elif part['type'] == 'text' %} {{ part['text'] }}{% endif %}
{%- endfor %}{% endif %}<end_of_utterance>
{% endfor %}
{%- if add_generation_prompt %}Assistant:{% endif %}"""

TEMPLATES = {"qwen": (QWEN_TOKENS, QWEN_TEMPLATE), "idefics3": (IDEFICS3_TOKENS, IDEFICS3_TEMPLATE)}


def corpus(lines: int = 2000, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) for _ in range(lines)]


def build(
    folder: Path,
    vocab_size: int = 4096,
    special: tuple[str, ...] = (),
    chat_template: str | None = None,
) -> Path:
    """Train and write the folder; ``special`` tokens are added unsplittable, and ``chat_template``
    goes into tokenizer_config.json."""
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodes: any text works
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    if special:
        tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config: dict[str, object] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 131072,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
    }
    if chat_template is not None:
        config["chat_template"] = chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder
