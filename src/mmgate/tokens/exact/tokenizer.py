"""Engine-exact token ids: what a vLLM server serving the model will prefill for a request.

A chat request is rendered with the model's chat template (:mod:`~mmgate.tokens.exact.template`,
from the conversation vLLM would build, :mod:`~mmgate.tokens.exact.conversation`) and encoded
with its ``tokenizer.json`` without adding special tokens (vLLM's chat default: the template
writes BOS; pieces between special tokens seen in earlier requests are not encoded again, see
:mod:`~mmgate.tokens.exact.segments`); a completions prompt is encoded with them (vLLM's
completions default). Each media
placeholder token is then repeated by the item's priced ``tokens``, as the family's processor does
(:mod:`~mmgate.tokens.exact.placeholders`), the k-th placeholder of a modality standing for the
k-th item of that modality, and every run becomes the item's
:class:`~mmgate.tokens.sequence.MMItem`, the range vLLM hashes the item's identity into.

:meth:`EngineTokenizer.sequence` returns ``None`` for what it does not model (other APIs, batched
or token-id prompts, files, a modality without a placeholder, a template that refuses the
conversation): the caller keeps the pseudo-token layout for that request, so routing still works
and only precise prefix hits are lost. The simulator's ``--tokenizer`` and the gateway's engine
mode both call this, so their ids agree by construction.
"""

from __future__ import annotations

from collections import defaultdict, deque
from functools import lru_cache
from pathlib import Path
from typing import Any

import msgspec

from mmgate.tokens.exact.files import ModelFiles, ModelFilesError, load_model_files

try:
    import jinja2  # noqa: F401 - both optional packages, checked once with one message
    import tokenizers  # noqa: F401
except ImportError:  # pragma: no cover - depends on the install
    raise ModelFilesError(
        "engine-exact tokens need the optional 'tokenizers' and 'jinja2' packages: "
        "pip install 'mmgate[tokenizer]'"
    ) from None

from mmgate.request.pieces import joined
from mmgate.request.view import Api, MediaAsset, Modality, RequestView
from mmgate.tokens.exact.conversation import Unsupported, conversation
from mmgate.tokens.exact.placeholders import Placeholder, placeholders_for
from mmgate.tokens.exact.segments import SegmentEncoder
from mmgate.tokens.exact.template import ChatTemplate, TemplateError
from mmgate.tokens.pricing import Pricing
from mmgate.tokens.sequence import MMItem, TokenSequence


class _CompletionFlags(msgspec.Struct):
    add_special_tokens: bool = True


_FLAGS = msgspec.json.Decoder(_CompletionFlags)


def _load_tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer  # the package's import checked it (see the top of the module)

    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # the Rust side raises a bare Exception on malformed files
        raise ModelFilesError(f"cannot load {path}: {exc}") from None


class EngineTokenizer:
    """One model's tokenizer and chat template, loaded once."""

    __slots__ = ("_placeholder_ids", "_segments", "_tok", "files", "template")

    def __init__(self, files: ModelFiles, content_format: str = "auto") -> None:
        self.files = files
        self._tok = _load_tokenizer(files.tokenizer_json)
        self._segments = SegmentEncoder(self._tok, files.tokenizer_json)
        try:
            self.template = ChatTemplate(
                files.chat_template,
                files.special_tokens,
                where=files.template_file,
                content_format=content_format,
            )
        except TemplateError as exc:
            raise ModelFilesError(str(exc)) from None
        self._placeholder_ids: dict[str, dict[Modality, int]] = {}

    @property
    def directory(self) -> str:
        return self.files.directory

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        """The tokenizer's ids for ``text``; without special tokens, pieces seen before are not
        encoded again (:class:`~mmgate.tokens.exact.segments.SegmentEncoder`)."""
        if not add_special_tokens:
            return self._segments.encode(text)
        ids: list[int] = self._tok.encode(text, add_special_tokens=True).ids
        return ids

    def placeholder_ids(self, family: str | None) -> dict[Modality, int]:
        """The family's placeholder token ids in this vocabulary; raises :class:`ModelFilesError`
        when the tokenizer lacks one (the folder is not the family's model)."""
        cached = self._placeholder_ids.get(family or "")
        if cached is not None:
            return cached
        ids: dict[Modality, int] = {}
        for modality, holder in placeholders_for(family).items():
            token_id = self._tok.token_to_id(holder.token)
            if token_id is None:
                raise ModelFilesError(
                    f"{self.files.tokenizer_json} has no {holder.token!r} token, the {modality.value} "
                    f"placeholder of {family}: is this the served model's tokenizer?"
                )
            ids[modality] = token_id
        self._placeholder_ids[family or ""] = ids
        return ids

    def sequence(self, view: RequestView, pricing: Pricing, family: str | None) -> TokenSequence | None:
        """The engine's token ids and media runs for ``view`` priced by ``pricing`` (from
        ``price(view, ...)``), or None when the request keeps the pseudo layout."""
        if view.prompt_token_ids is not None:
            return None  # token-id prompts: the pseudo layout already uses the client's ids
        if view.api is Api.COMPLETIONS:
            if view.assets or view.extra.get("prompt_count", 1) != 1:
                return None
            try:
                flags = _FLAGS.decode(joined(view.body)) if view.body else _CompletionFlags()
            except msgspec.MsgspecError:
                return None
            return TokenSequence(
                self.encode("".join(view.texts), add_special_tokens=flags.add_special_tokens), []
            )
        if view.api is not Api.CHAT:
            return None
        try:
            holders = placeholders_for(family)
            conv = conversation(joined(view.body), self.template.content_format, holders)
            text = self.template.render(
                conv.messages,
                tools=conv.tools,
                documents=conv.documents,
                add_generation_prompt=conv.add_generation_prompt,
                continue_final_message=conv.continue_final_message,
                kwargs=conv.kwargs,
            )
            ids = self.encode(text, add_special_tokens=conv.add_special_tokens)
            return self._expand(ids, conv.media, view.assets, pricing, self.placeholder_ids(family), holders)
        except (Unsupported, TemplateError, ModelFilesError):
            return None

    @staticmethod
    def _expand(
        ids: list[int],
        media: list[Modality],
        assets: list[MediaAsset],
        pricing: Pricing,
        placeholder_ids: dict[Modality, int],
        holders: dict[Modality, Placeholder],
    ) -> TokenSequence | None:
        if not media:
            return TokenSequence(ids, [])
        if len(media) != len(assets) or len(assets) != len(pricing.assets):
            return None
        queues: dict[int, deque[tuple[MediaAsset, int]]] = defaultdict(deque)
        for modality, asset, price in zip(media, assets, pricing.assets, strict=True):
            token_id = placeholder_ids.get(modality)
            if token_id is None or modality not in holders:
                return None
            queues[token_id].append((asset, price.tokens))
        out: list[int] = []
        items: list[MMItem] = []
        start = 0
        for i, token in enumerate(ids):
            queue = queues.get(token)
            if queue is None:
                continue
            if not queue:
                return None  # more placeholders than items: the engine would refuse it too
            asset, length = queue.popleft()
            out.extend(ids[start:i])
            items.append(MMItem(asset.identity, asset.modality, len(out), length))
            out.extend([token] * length)
            start = i + 1
        if any(queues.values()):
            return None  # an item the template did not place
        out.extend(ids[start:])
        return TokenSequence(out, items)


@lru_cache(maxsize=16)
def _cached(directory: str, chat_template: str | None, content_format: str) -> EngineTokenizer:
    return EngineTokenizer(load_model_files(directory, chat_template), content_format)


def load_engine_tokenizer(
    directory: str | Path, *, chat_template: str | Path | None = None, content_format: str = "auto"
) -> EngineTokenizer:
    """The tokenizer of a local model folder, loaded once per process per folder and settings;
    raises :class:`ModelFilesError` saying what the folder lacks. ``chat_template`` and
    ``content_format`` are vLLM's ``--chat-template`` and ``--chat-template-content-format``."""
    template = str(Path(chat_template).expanduser().resolve()) if chat_template else None
    return _cached(str(Path(directory).expanduser().resolve()), template, content_format)
