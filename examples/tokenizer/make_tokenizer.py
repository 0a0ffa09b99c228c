"""Build a small tokenizer folder offline, for load generators that insist on a local tokenizer,
and for trying engine-exact token ids against the simulator.

guidellm, inference-perf and aiperf count prompt and output tokens with a Hugging Face tokenizer
(``transformers.AutoTokenizer``), and by default fetch the served model's from the Hub. Against the
demo (or any fleet) they only need *a* tokenizer: this script trains a byte-level BPE with the
``tokenizers`` library on text it makes itself, and writes ``tokenizer.json`` and
``tokenizer_config.json`` into a folder that ``AutoTokenizer.from_pretrained(FOLDER)`` loads.
Nothing is downloaded. Its counts are not the served model's: they only make the clients run.

With ``--chat-template qwen`` the folder is also a stand-in model folder for mmgate's engine mode
(``tokens: [{mode: engine, tokenizerDir: FOLDER}]`` on token-producer, ``mmgate sim --tokenizer
FOLDER``): Qwen-VL's special tokens (ChatML turns, vision markers, image and video pads) are added
and a ChatML chat template in Qwen-VL's style is written, so gateway and simulator agree on real
token ids and the pads expand as a Qwen-VL processor expands them.

    python examples/tokenizer/make_tokenizer.py /tmp/mmgate-tokenizer
    python examples/tokenizer/make_tokenizer.py --chat-template qwen /tmp/qwen-like
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

WORDS = (
    "the image shows a quiet street with parked cars and tall trees under a pale sky person red coat "
    "walks past shop window while light rain falls on pavement in distance tram turns corner clock "
    "above station reads ten past four what is this picture describe count slowly answer briefly"
).split()

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

TEMPLATES = {"qwen": (QWEN_TOKENS, QWEN_TEMPLATE)}


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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Write a small offline tokenizer folder.")
    parser.add_argument("folder", type=Path)
    parser.add_argument(
        "--chat-template", choices=sorted(TEMPLATES), help="add a family's tokens and template"
    )
    args = parser.parse_args()
    tokens, template = TEMPLATES[args.chat_template] if args.chat_template else ((), None)
    out = build(args.folder, special=tokens, chat_template=template)
    print(f"wrote {out / 'tokenizer.json'} and {out / 'tokenizer_config.json'}")
