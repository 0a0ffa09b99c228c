"""Encoding a rendered chat prompt piece by piece, remembering the pieces.

Encoding the text is most of engine mode's cost (a 2k-token chat is ~1 ms of ``tokenizers`` on an
idle core), and chats repeat themselves: a conversation's earlier turns and a shared system prompt
come back in every request. ``tokenizers`` first cuts the text at its added tokens (``<|im_start|>``,
``<|vision_start|>``, ...; leftmost-longest match on the raw text) and then normalizes,
pre-tokenizes and encodes each piece between them on its own. So the ids of a prompt are the
concatenation of each piece's ids, and a piece seen before need not be encoded again.

That holds when every step after the cut works piece by piece: added tokens matched on the raw text
with no stripping or word-boundary rule (``lstrip``, ``rstrip``, ``single_word``, ``normalized``
all false), a normalizer and pre-tokenizer from the per-piece kinds below (ByteLevel's prefix space
is added per piece, so it qualifies; SentencePiece's Metaspace with ``prepend_scheme: first`` or a
``Prepend`` normalizer treat the first piece differently, so they do not). Any other tokenizer is
encoded whole every time, which is always right. Special tokens are never added here (vLLM's chat
default); the completions path encodes whole.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

PER_PIECE_NORMALIZERS = frozenset(
    {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "StripAccents", "Replace"}
)
PER_PIECE_PRE_TOKENIZERS = frozenset(
    {"ByteLevel", "Split", "Digits", "Whitespace", "WhitespaceSplit", "Punctuation", "UnicodeScripts"}
)
MAX_PIECES = 4096
MAX_CHARS = 8_000_000  # text remembered (about 40 MB with the ids); beyond it the oldest pieces go


def _kinds(node: Any, key: str) -> list[str]:
    """The component types of a normalizer / pre-tokenizer, through ``Sequence`` nesting."""
    if node is None:
        return []
    if not isinstance(node, dict):
        return ["?"]
    if node.get("type") == "Sequence":
        return [k for child in node.get(key, []) for k in _kinds(child, key)]
    return [str(node.get("type"))]


def piecewise(tokenizer_json: str | Path) -> bool:
    """Whether the tokenizer's ids are the concatenation of its pieces' ids (see the module doc)."""
    try:
        spec = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    added = spec.get("added_tokens") or []
    if not added or any(t.get(f) for t in added for f in ("lstrip", "rstrip", "single_word", "normalized")):
        return False
    normalizers = _kinds(spec.get("normalizer"), "normalizers")
    pre_tokenizers = _kinds(spec.get("pre_tokenizer"), "pretokenizers")
    return set(normalizers) <= PER_PIECE_NORMALIZERS and set(pre_tokenizers) <= PER_PIECE_PRE_TOKENIZERS


class SegmentEncoder:
    """``encode(text)`` equals ``tokenizer.encode(text, add_special_tokens=False).ids``."""

    __slots__ = ("_cache", "_chars", "_encode", "_ids", "_split")

    def __init__(self, tokenizer: Any, tokenizer_json: str | Path) -> None:
        self._encode = tokenizer.encode
        self._cache: dict[str, list[int]] = {}
        self._chars = 0
        self._ids: dict[str, int] = {}
        self._split = None
        if piecewise(tokenizer_json):
            self._ids = {t.content: i for i, t in tokenizer.get_added_tokens_decoder().items()}
            # Longest first: at one position the regex takes the first alternative that matches.
            alternatives = "|".join(re.escape(c) for c in sorted(self._ids, key=len, reverse=True))
            self._split = re.compile(f"({alternatives})").split

    @property
    def remembers(self) -> bool:
        """False when the tokenizer is encoded whole every time."""
        return self._split is not None

    def encode(self, text: str) -> list[int]:
        if self._split is None:
            ids: list[int] = self._encode(text, add_special_tokens=False).ids
            return ids
        out: list[int] = []
        cache = self._cache
        for i, piece in enumerate(self._split(text)):
            if i % 2:
                out.append(self._ids[piece])
            elif piece:
                known = cache.get(piece)
                out.extend(known if known is not None else self._remember(piece))
        return out

    def _remember(self, piece: str) -> list[int]:
        ids: list[int] = self._encode(piece, add_special_tokens=False).ids
        if len(piece) > MAX_CHARS // 4:
            return ids  # one huge piece would flush everything else
        cache = self._cache
        while cache and (len(cache) >= MAX_PIECES or self._chars + len(piece) > MAX_CHARS):
            oldest = next(iter(cache))
            self._chars -= len(oldest)
            del cache[oldest]
        cache[piece] = ids
        self._chars += len(piece)
        return ids
