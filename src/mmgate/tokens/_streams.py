"""The token-sequence types of :mod:`mmgate.tokens.sequence`, kept out of that module so mypyc
can compile it (:mod:`mmgate.compiled`): mypyc builds a module's classes itself and would drop
msgspec's class keywords (``frozen``) and a slotted dataclass's layout. ``sequence`` re-exports
them; import them from there (or from :mod:`mmgate.tokens`).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from mmgate.request.view import Modality
from mmgate.tokens.text import BYTES_PER_TOKEN


class MMItem(msgspec.Struct, frozen=True):
    """One media item's span in a token sequence. (A frozen msgspec struct, not a frozen
    dataclass: every request with media makes one per item, and a frozen dataclass's
    ``__init__`` costs ten times as much.)"""

    identity: str
    modality: Modality
    offset: int  # index of the item's first token in ``token_ids``
    length: int  # tokens + extra_tokens of its price


@dataclass(slots=True)
class TokenSequence:
    token_ids: list[int]
    mm_items: list[MMItem]

    def __len__(self) -> int:
        return len(self.token_ids)


class TokenStream(msgspec.Struct):
    """The same sequence as :func:`~mmgate.tokens.sequence.build_sequence`, kept as little-endian
    uint32 bytes.

    Block hashing reads bytes, so the scheduler builds this form directly instead of packing the
    text into thousands of ints and back. ``token_ids`` is a zero-copy integer view of it.
    """

    data: bytes
    mm_items: list[MMItem]

    def __len__(self) -> int:
        return len(self.data) // BYTES_PER_TOKEN

    @property
    def token_ids(self) -> Sequence[int]:
        if _NATIVE_LE:
            return memoryview(self.data).cast("I")
        ids = array("I", self.data)
        ids.byteswap()
        return ids


_NATIVE_LE = sys.byteorder == "little" and array("I").itemsize == BYTES_PER_TOKEN
