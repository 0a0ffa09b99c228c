"""Which token ids each served model gets: the ``tokens`` parameter of ``token-producer``.

::

    - type: token-producer
      parameters:
        tokens:
        - model: Qwen/Qwen2.5-VL-7B-Instruct     # a served model id, or a glob: "Qwen/*", "*"
          mode: engine                           # the model's own token ids
          tokenizerDir: /models/Qwen2.5-VL-7B-Instruct
          # chatTemplate: /etc/vllm/template.jinja   # only if the pods run --chat-template FILE
          # contentFormat: auto                      # the pods' --chat-template-content-format
        - model: "*"
          mode: pseudo                           # the default: mmgate's pseudo-token stream

``pseudo`` is the stream the simulator and the discrete-event benchmark share (no tokenizer). It is
exact for simulated pods, and for a real vLLM it still serves every signal but precise prefix
matching. ``engine`` gives the ids a vLLM server computes (:mod:`~mmgate.tokens.exact.tokenizer`),
which ``precise-prefix-cache-producer`` needs to find the blocks real pods report. The first entry
whose ``model`` matches (exact, else ``fnmatch`` glob, case-sensitive like vLLM's served names)
applies (an entry naming the id exactly wins over globs); a model no entry matches is ``pseudo``.

Tokenizers are loaded once, when the config is built, from local folders only; a folder that cannot
serve (missing, no tokenizer.json, no chat template, no placeholder token for the family the model
id names) is a :class:`~mmgate.tokens.exact.files.ModelFilesError`, which ``mmgate check`` and
``mmgate serve`` report as a config error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

import msgspec

from mmgate.tokens.exact.files import ModelFilesError

if TYPE_CHECKING:  # the tokenizer needs the optional packages; pseudo-only configs never import it
    from mmgate.tokens.exact.tokenizer import EngineTokenizer

MODES = ("pseudo", "engine")
MAX_MODELS = 256  # distinct model ids remembered; a client inventing ids cannot grow memory
_GLOB = frozenset("*?[")


class TokenMode(msgspec.Struct, forbid_unknown_fields=True):
    """One entry of ``tokens``."""

    model: str = "*"
    mode: str = "pseudo"  # one of MODES
    tokenizerDir: str | None = None
    chatTemplate: str | None = None  # vLLM --chat-template: a file replacing the folder's template
    contentFormat: str = "auto"  # vLLM --chat-template-content-format: auto, string, openai


class TokenModes:
    """The engine tokenizer (or None: pseudo) of each served model id."""

    __slots__ = ("_cache", "_entries")

    def __init__(self, entries: Sequence[TokenMode], family_of: Callable[[str], str | None]) -> None:
        resolved: list[tuple[str, EngineTokenizer | None]] = []
        for i, entry in enumerate(entries):
            where = f"tokens[{i}] (model {entry.model!r})"
            if not entry.model:
                raise ValueError(f"{where}: model must name a served model id or a glob such as '*'")
            if entry.mode not in MODES:
                raise ValueError(f"{where}: mode {entry.mode!r} is not one of {', '.join(MODES)}")
            if entry.mode == "pseudo":
                if entry.tokenizerDir or entry.chatTemplate or entry.contentFormat != "auto":
                    raise ValueError(
                        f"{where}: tokenizerDir, chatTemplate and contentFormat are read in mode engine only"
                    )
                resolved.append((entry.model, None))
                continue
            if not entry.tokenizerDir:
                raise ValueError(
                    f"{where}: mode engine needs tokenizerDir, the local folder with the served model's "
                    "tokenizer.json and chat template (tokenizer_config.json or chat_template.jinja)"
                )
            try:
                from mmgate.tokens.exact.tokenizer import load_engine_tokenizer

                tokenizer = load_engine_tokenizer(
                    entry.tokenizerDir, chat_template=entry.chatTemplate, content_format=entry.contentFormat
                )
                if not _GLOB & set(entry.model):  # a literal id: its family is known now
                    tokenizer.placeholder_ids(family_of(entry.model))
            except ModelFilesError as exc:
                raise ValueError(f"{where}: {exc}") from None
            resolved.append((entry.model, tokenizer))
        self._entries = tuple(resolved)
        self._cache: dict[str, EngineTokenizer | None] = {}

    def for_model(self, model: str) -> EngineTokenizer | None:
        if model in self._cache:
            return self._cache[model]
        exact = [t for m, t in self._entries if m == model]
        found = exact[0] if exact else next((t for m, t in self._entries if fnmatchcase(model, m)), None)
        if len(self._cache) < MAX_MODELS:
            self._cache[model] = found
        return found
