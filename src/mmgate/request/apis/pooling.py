"""``/v1/embeddings``, ``/pooling`` and ``/classify``: vLLM's pooling APIs, which share one shape.

Each takes either a completions-style ``input`` (a string, strings, token ids or lists of ids) or
chat-style ``messages`` (multimodal: images, audio and video parts as in chat), and answers without
decoding: a request costs its prompt only. vLLM's ``model`` is optional here.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from mmgate.errors import RequestError
from mmgate.request import bodies
from mmgate.request.apis.chat import render_messages
from mmgate.request.apis.completions import render_prompt
from mmgate.request.assets import PromptBuilder
from mmgate.request.decode import decode_body, require_utf8
from mmgate.request.view import Api, RequestView

_ABSENT = msgspec.Raw()


class PoolingBody(msgspec.Struct):
    input: msgspec.Raw = _ABSENT
    messages: list[bodies.ChatMessage] | None = None
    model: str = ""
    cache_salt: str | None = None


_DECODER = msgspec.json.Decoder(PoolingBody)


def parse_pooling(body: bytes, _headers: Mapping[str, str], api: Api, b: PromptBuilder) -> RequestView:
    req = decode_body(_DECODER, body)
    require_utf8(body)
    token_ids: list[int] | None = None
    count = 1
    if req.messages is not None:
        if len(req.input):
            raise RequestError("Send either 'input' or 'messages', not both.", param="messages")
        render_messages(req.messages, b)
    elif len(req.input):
        token_ids, count = render_prompt(req.input, "input", b)
    else:
        raise RequestError("Missing required field 'input' (or chat-style 'messages').", param="input")
    view = RequestView(
        api=api,
        model=req.model,
        parts=b.finish(),
        max_tokens=0,
        cache_salt=req.cache_salt,
        prompt_token_ids=token_ids,
    )
    if count != 1:
        view.extra["prompt_count"] = count
    return view
