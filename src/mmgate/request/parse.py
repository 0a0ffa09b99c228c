"""``parse_request``: one decode of a request body of any API, into a :class:`RequestView`.

The body-size limit and the ``model`` requirement are checked here for every API; each API's shape
is read by its parser in :mod:`mmgate.request.apis` (chat, completions and Anthropic messages
decoded directly, as the hot path; the rest through :func:`~mmgate.request.apis.parser_for`).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from mmgate.errors import RequestError
from mmgate.request import bodies
from mmgate.request.apis import parser_for
from mmgate.request.apis.chat import parse_chat
from mmgate.request.apis.completions import parse_completions
from mmgate.request.apis.messages import parse_messages
from mmgate.request.assets import PromptBuilder
from mmgate.request.decode import decode_body, decode_chat, require_utf8
from mmgate.request.limits import DEFAULT_LIMITS, Limits
from mmgate.request.view import Api, RequestView

# The OpenAI and Anthropic APIs, whose specs require ``model``; vLLM's own routes (tokenize,
# pooling, score, ...) document it as optional (the served model), so they are not refused.
MODEL_REQUIRED = frozenset(
    {
        Api.CHAT,
        Api.COMPLETIONS,
        Api.MESSAGES,
        Api.RESPONSES,
        Api.EMBEDDINGS,
        Api.TRANSCRIPTIONS,
        Api.TRANSLATIONS,
    }
)


def parse_request(
    body: bytes,
    headers: Mapping[str, str],
    *,
    api: Api = Api.CHAT,
    limits: Limits | None = None,
) -> RequestView:
    """Understand a request body once; raises :class:`RequestError` for anything a client got wrong."""
    limits = limits or DEFAULT_LIMITS
    if len(body) > limits.max_body_bytes:
        raise RequestError(
            f"Request body is {len(body)} bytes; the limit is {limits.max_body_bytes} bytes.", status=413
        )
    if not body or (body[:1].isspace() and not body.strip()):
        # Said as such: a JSON decoder's word for it ("Input data was truncated") reads as a
        # body cut short in transit; ``curl -d @file`` with a missing file sends nothing.
        raise RequestError("The request body is empty.", code="empty_body")
    builder = PromptBuilder(headers, limits)
    layout = None
    if api is Api.CHAT:
        try:
            chat, layout = decode_chat(body)  # skips the JSON scan of inline data URIs
        except msgspec.MsgspecError:
            chat = decode_body(bodies.CHAT, body)  # raises the client's error, worded as usual
        view = parse_chat(chat, builder)
    elif api is Api.COMPLETIONS:
        completions = decode_body(bodies.COMPLETIONS, body)
        require_utf8(body)  # decode_chat applies the same JSON rules to chat bodies
        view = parse_completions(completions, builder)
    elif api is Api.MESSAGES:
        messages = decode_body(bodies.MESSAGES, body)
        require_utf8(body)
        view = parse_messages(messages, builder)
    else:
        view = parser_for(api)(body, headers, api, builder)
    if limits.require_model and api in MODEL_REQUIRED and not view.model.strip():
        raise RequestError(
            "Missing required field 'model': name the model to run (GET /v1/models lists them).",
            param="model",
            code="missing_model",
        )
    view.body = body
    view.layout = layout
    view.unprobed_assets = builder.unprobed
    if builder.decoded_bytes:
        view.extra["decoded_bytes"] = builder.decoded_bytes
    return view
