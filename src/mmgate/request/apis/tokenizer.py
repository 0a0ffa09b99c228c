"""``/tokenize`` and ``/detokenize``: vLLM's tokenizer endpoints.

``/tokenize`` takes a completions-style ``prompt`` string or chat ``messages`` (rendered as chat
renders them, media included: vLLM counts their placeholder tokens too); ``/detokenize`` takes
``tokens``, a list of ids, which is what it costs. Neither decodes; ``model`` is optional.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from mmgate.errors import RequestError
from mmgate.request import bodies
from mmgate.request.apis.chat import render_messages
from mmgate.request.assets import PromptBuilder
from mmgate.request.decode import decode_body, require_utf8
from mmgate.request.view import Api, RequestView


class TokenizeBody(msgspec.Struct):
    prompt: str | None = None
    messages: list[bodies.ChatMessage] | None = None
    model: str = ""


class DetokenizeBody(msgspec.Struct):
    tokens: list[int] | None = None
    model: str = ""


_TOKENIZE = msgspec.json.Decoder(TokenizeBody)
_DETOKENIZE = msgspec.json.Decoder(DetokenizeBody)


def parse_tokenizer(body: bytes, _headers: Mapping[str, str], api: Api, b: PromptBuilder) -> RequestView:
    if api is Api.DETOKENIZE:
        detok = decode_body(_DETOKENIZE, body)
        if detok.tokens is None:
            raise RequestError("Missing required field 'tokens'.", param="tokens")
        return RequestView(api=api, model=detok.model, parts=[], max_tokens=0, prompt_token_ids=detok.tokens)
    tok = decode_body(_TOKENIZE, body)
    require_utf8(body)
    if tok.messages is not None:
        if tok.prompt is not None:
            raise RequestError("Send either 'prompt' or 'messages', not both.", param="messages")
        render_messages(tok.messages, b)
    elif tok.prompt is not None:
        b.text(tok.prompt)
    else:
        raise RequestError("Missing required field 'prompt' (or chat-style 'messages').", param="prompt")
    return RequestView(api=api, model=tok.model, parts=b.finish(), max_tokens=0)
