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

The builder lives in :mod:`mmgate.refengine.tiny_tokenizer` (the reference engine's tiny models use
it too); this script is its command line.

    python examples/tokenizer/make_tokenizer.py /tmp/mmgate-tokenizer
    python examples/tokenizer/make_tokenizer.py --chat-template qwen /tmp/qwen-like
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mmgate.refengine.tiny_tokenizer import QWEN_TEMPLATE, QWEN_TOKENS, TEMPLATES, build

__all__ = ["QWEN_TEMPLATE", "QWEN_TOKENS", "build"]


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
