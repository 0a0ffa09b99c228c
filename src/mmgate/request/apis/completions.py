"""OpenAI completions: the prompt (text, token ids, or a list of either) and its multimodal extras."""

from __future__ import annotations

import msgspec

from mmgate.errors import RequestError
from mmgate.request import bodies
from mmgate.request.assets import PromptBuilder
from mmgate.request.decode import decode_body
from mmgate.request.view import Api, RequestView


def parse_completions(req: bodies.CompletionBody, b: PromptBuilder) -> RequestView:
    token_ids, count = render_prompt(req.prompt, "prompt", b)
    view = RequestView(
        api=Api.COMPLETIONS,
        model=req.model,
        parts=b.finish(),
        stream=bool(req.stream),
        max_tokens=req.max_tokens,
        cache_salt=req.cache_salt,
        prompt_token_ids=token_ids,
    )
    if count != 1:
        view.extra["prompt_count"] = count
    return view


def render_prompt(raw: msgspec.Raw, name: str, b: PromptBuilder) -> tuple[list[int] | None, int]:
    """A completions-style prompt (a string, strings, token ids or lists of them) into ``b``;
    returns its token ids when given as ids, and how many prompts it holds. ``name`` is its field
    (``prompt``; ``input`` in vLLM's pooling APIs)."""
    if not len(raw):
        raise RequestError(f"Missing required field '{name}'.", param=name)
    prompt = decode_body(bodies.PROMPT, bytes(raw), prefix=name)
    token_ids: list[int] | None = None
    count = 1
    if isinstance(prompt, str):
        b.text(prompt)
    elif all(isinstance(p, str) for p in prompt):  # a batch of prompts: one text part each
        for p in prompt:
            b.text(str(p))
            b.finish()
        count = len(prompt)
    elif all(isinstance(p, int) for p in prompt):
        token_ids = [int(p) for p in prompt if isinstance(p, int)]
    elif all(isinstance(p, list) for p in prompt):  # a batch of token-id prompts, concatenated
        token_ids = [t for p in prompt if isinstance(p, list) for t in p]
        count = len(prompt)
    else:
        raise RequestError(
            f"'{name}' must be a string, a list of strings, a list of token ids or a list of such lists.",
            param=name,
        )
    return token_ids, count
