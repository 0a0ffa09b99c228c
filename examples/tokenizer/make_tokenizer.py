"""Build a small tokenizer folder offline, for load generators that insist on a local tokenizer.

guidellm, inference-perf and aiperf count prompt and output tokens with a Hugging Face tokenizer
(``transformers.AutoTokenizer``), and by default fetch the served model's from the Hub. Against the
demo (or any fleet) they only need *a* tokenizer: this script trains a byte-level BPE with the
``tokenizers`` library on text it makes itself, and writes ``tokenizer.json`` and
``tokenizer_config.json`` into a folder that ``AutoTokenizer.from_pretrained(FOLDER)`` loads.
Nothing is downloaded. Its counts are not the served model's: they only make the clients run.

    python examples/tokenizer/make_tokenizer.py /tmp/mmgate-tokenizer
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

WORDS = (
    "the image shows a quiet street with parked cars and tall trees under a pale sky person red coat "
    "walks past shop window while light rain falls on pavement in distance tram turns corner clock "
    "above station reads ten past four what is this picture describe count slowly answer briefly"
).split()


def corpus(lines: int = 2000, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) for _ in range(lines)]


def build(folder: Path, vocab_size: int = 4096) -> Path:
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodes: any text works
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 131072,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: make_tokenizer.py FOLDER", file=sys.stderr)
        raise SystemExit(2)
    out = build(Path(sys.argv[1]))
    print(f"wrote {out / 'tokenizer.json'} and {out / 'tokenizer_config.json'}")
