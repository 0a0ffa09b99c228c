"""Parsers of the request shapes beyond chat, completions and messages, one module per API family:
``responses`` (OpenAI Responses), ``pooling`` (embeddings, pooling, classify), ``scoring`` (score,
rerank), ``tokenizer`` (tokenize, detokenize) and ``audio`` (transcriptions, translations).

Each reads only what routing and pricing need, into the same :class:`~mmgate.request.RequestView`
as chat, so the scheduler, pricing and the simulator treat every route alike. Field names and
shapes are vLLM's (its ``entrypoints`` protocol classes), and each client mistake is a 400 naming
the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from mmgate.request.apis.audio import parse_audio
from mmgate.request.apis.pooling import parse_pooling
from mmgate.request.apis.responses import parse_responses
from mmgate.request.apis.scoring import parse_scoring
from mmgate.request.apis.tokenizer import parse_tokenizer
from mmgate.request.assets import PromptBuilder
from mmgate.request.view import Api, RequestView

ApiParser = Callable[[bytes, Mapping[str, str], Api, PromptBuilder], RequestView]

PARSERS: dict[Api, ApiParser] = {
    Api.RESPONSES: parse_responses,
    Api.EMBEDDINGS: parse_pooling,
    Api.POOLING: parse_pooling,
    Api.CLASSIFY: parse_pooling,
    Api.SCORE: parse_scoring,
    Api.RERANK: parse_scoring,
    Api.TOKENIZE: parse_tokenizer,
    Api.DETOKENIZE: parse_tokenizer,
    Api.TRANSCRIPTIONS: parse_audio,
    Api.TRANSLATIONS: parse_audio,
}


def parser_for(api: Api) -> ApiParser:
    return PARSERS[api]
