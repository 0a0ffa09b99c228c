"""parse_request on tokenize and detokenize: a prompt or messages, and token ids."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mmgate.request import Api, role_header
from support.apis import parse, refused


def test_tokenize_prompt_or_messages_and_detokenize_ids() -> None:
    assert parse(Api.TOKENIZE, {"prompt": "hello"}).parts == ["hello"]
    view = parse(Api.TOKENIZE, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert view.parts == [f"{role_header('user')}hi\n"] and view.model == "m"
    view = parse(Api.DETOKENIZE, {"model": "m", "tokens": [5, 6, 7]})
    assert (view.prompt_token_ids, view.parts, view.max_tokens) == ([5, 6, 7], [], 0)


@pytest.mark.parametrize(
    ("api", "doc", "param"),
    [
        (Api.TOKENIZE, {"model": "m"}, "prompt"),
        (Api.TOKENIZE, {"prompt": "a", "messages": []}, "messages"),
        (Api.TOKENIZE, {"prompt": 3}, "prompt"),
        (Api.DETOKENIZE, {"model": "m"}, "tokens"),
        (Api.DETOKENIZE, {"tokens": ["a"]}, "tokens[0]"),
    ],
)
def test_tokenizer_mistakes_are_400s_naming_the_field(api: Api, doc: dict[str, Any], param: str) -> None:
    assert refused(api, orjson.dumps(doc)).param == param
