"""Text tokens: llm-d's bytes/4 estimate by default, an exact count with a local tokenizer.json.

The estimate packs UTF-8 bytes four to a pseudo-token and restarts on a 4-byte boundary before each
media item, exactly like llm-d's estimate backend and :mod:`mmgate.tokens.sequence`, so the text
count in :class:`~mmgate.tokens.pricing.Pricing` equals the text positions of the pseudo-sequence.
An exact count needs the optional ``tokenizers`` package and a tokenizer.json path; nothing is ever
downloaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Protocol

BYTES_PER_TOKEN = 4


class TextCounter(Protocol):
    def __call__(self, runs: Iterable[str]) -> int: ...


def estimate_runs(runs: Iterable[str]) -> int:
    """bytes/4 per run of text between media items (each run padded to a whole token)."""
    total = 0
    for r in runs:
        # An ASCII str's length is its UTF-8 size (isascii() reads a flag): no encoded copy.
        total -= -(len(r) if r.isascii() else len(r.encode())) // BYTES_PER_TOKEN
    return total


class TokenizerCounter:
    """Exact counts with a Hugging Face ``tokenizers`` tokenizer.json (no special tokens added)."""

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - depends on the install
            raise ValueError(
                "counting text with a tokenizer.json needs the optional 'tokenizers' package: "
                "pip install 'mmgate[tokenizer]'"
            ) from None
        file = Path(path)
        if not file.is_file():
            raise ValueError(f"tokenizer file not found: {file} (give the path of a local tokenizer.json)")
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the Rust side raises a bare Exception on malformed files
            raise ValueError(f"cannot load tokenizer {file}: {exc}") from None
        self.path = str(file)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def __call__(self, runs: Iterable[str]) -> int:
        return sum(self.count(r) for r in runs if r)


@lru_cache(maxsize=8)
def load_tokenizer(path: str) -> TokenizerCounter:
    """One loaded tokenizer per path per process."""
    return TokenizerCounter(path)
