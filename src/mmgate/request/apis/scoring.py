"""``/score`` and ``/rerank``: vLLM's cross-encoder (and late-interaction) scoring APIs.

Both pair queries with documents. An input is a string or ``{"content": [parts]}`` with chat's
content parts (text, images, video). ``/score`` takes one of vLLM's spellings of the two sides,
``queries`` with ``documents`` or ``items``, ``data_1`` with ``data_2``, or ``text_1`` with
``text_2``, each one input or a list (1:1, 1:N or N:N); ``/rerank`` takes one ``query`` and a list
of ``documents``. The model runs one sequence per pair, query then document, so each pair renders
as its own prompt: a query shared by N documents costs N times, as it does on the pod.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from mmgate.errors import RequestError
from mmgate.request import bodies
from mmgate.request.apis.chat import chat_part
from mmgate.request.assets import PromptBuilder
from mmgate.request.decode import decode_body, require_utf8
from mmgate.request.view import Api, RequestView


class ScoreContent(msgspec.Struct):
    content: list[bodies.ChatPart]


ScoreInput = str | ScoreContent
ScoreInputs = ScoreInput | list[ScoreInput]

_SIDES = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2"))


class ScoreBody(msgspec.Struct):
    model: str = ""
    queries: ScoreInputs | None = None
    documents: ScoreInputs | None = None
    items: ScoreInputs | None = None
    data_1: ScoreInputs | None = None
    data_2: ScoreInputs | None = None
    text_1: ScoreInputs | None = None
    text_2: ScoreInputs | None = None
    cache_salt: str | None = None


class RerankBody(msgspec.Struct):
    model: str = ""
    query: ScoreInput | None = None
    documents: ScoreInputs | None = None
    top_n: int = 0
    cache_salt: str | None = None


_SCORE = msgspec.json.Decoder(ScoreBody)
_RERANK = msgspec.json.Decoder(RerankBody)


def parse_scoring(body: bytes, _headers: Mapping[str, str], api: Api, b: PromptBuilder) -> RequestView:
    if api is Api.RERANK:
        rerank = decode_body(_RERANK, body)
        require_utf8(body)
        if rerank.query is None:
            raise RequestError("Missing required field 'query'.", param="query")
        if rerank.documents is None:
            raise RequestError("Missing required field 'documents'.", param="documents")
        model, salt = rerank.model, rerank.cache_salt
        pairs = _pairs(("query", [rerank.query]), ("documents", _listed(rerank.documents)))
    else:
        score = decode_body(_SCORE, body)
        require_utf8(body)
        model, salt = score.model, score.cache_salt
        pairs = _pairs(*_score_sides(score))
    for (query, query_at), (doc, doc_at) in pairs:
        _input(query, query_at, b)
        _input(doc, doc_at, b)
        b.finish()  # one sequence per pair
    view = RequestView(api=api, model=model, parts=b.finish(), max_tokens=0, cache_salt=salt)
    if len(pairs) != 1:
        view.extra["prompt_count"] = len(pairs)
    return view


def _score_sides(score: ScoreBody) -> tuple[tuple[str, list[ScoreInput]], tuple[str, list[ScoreInput]]]:
    for first, second in _SIDES:
        one, two = getattr(score, first), getattr(score, second)
        if one is not None and two is not None:
            return (first, _listed(one)), (second, _listed(two))
    spelled = "; ".join(f"'{a}' and '{b}'" for a, b in _SIDES)
    given = next((name for pair in _SIDES for name in pair if getattr(score, name) is not None), None)
    raise RequestError(f"Send the two sides to score as one of: {spelled}.", param=given or "queries")


def _listed(inputs: ScoreInputs) -> list[ScoreInput]:
    return inputs if isinstance(inputs, list) else [inputs]


Side = tuple[str, list[ScoreInput]]
Pair = tuple[tuple[ScoreInput, str], tuple[ScoreInput, str]]


def _pairs(first: Side, second: Side) -> list[Pair]:
    """vLLM's pairing: 1:N (the one query with each document) or N:N (in order)."""
    (name_1, inputs_1), (name_2, inputs_2) = first, second
    if not inputs_1:
        raise RequestError(f"'{name_1}' is empty; send at least one.", param=name_1)
    if not inputs_2:
        raise RequestError(f"'{name_2}' is empty; send at least one.", param=name_2)
    if len(inputs_1) > 1 and len(inputs_1) != len(inputs_2):
        raise RequestError(
            f"'{name_1}' has {len(inputs_1)} inputs and '{name_2}' {len(inputs_2)}: "
            "pair them 1:1, 1:N or N:N.",
            param=name_2,
        )
    out: list[Pair] = []
    for j, doc in enumerate(inputs_2):
        i = 0 if len(inputs_1) == 1 else j
        out.append(((inputs_1[i], _at(name_1, i, inputs_1)), (doc, _at(name_2, j, inputs_2))))
    return out


def _at(name: str, index: int, inputs: list[ScoreInput]) -> str:
    return name if len(inputs) == 1 and name == "query" else f"{name}[{index}]"


def _input(value: ScoreInput, param: str, b: PromptBuilder) -> None:
    if isinstance(value, str):
        b.text(value)
        return
    for k, part in enumerate(value.content):
        chat_part(part, f"{param}.content[{k}]", b)
