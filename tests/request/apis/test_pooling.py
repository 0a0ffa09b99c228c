"""parse_request on embeddings, pooling and classify: completion inputs or chat messages."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mmgate.request import Api
from support.apis import parse, refused
from support.bodies import data_uri, image, image_part

PNG = image("PNG", 1280, 720)


@pytest.mark.parametrize("api", [Api.EMBEDDINGS, Api.POOLING, Api.CLASSIFY])
def test_pooling_apis_take_completion_inputs_or_chat_messages(api: Api) -> None:
    view = parse(api, {"model": "m", "input": ["a", "b", "c"]})
    assert (view.api, view.parts, view.extra["prompt_count"], view.max_tokens) == (api, ["a", "b", "c"], 3, 0)
    assert parse(api, {"model": "m", "input": [[1, 2], [3]]}).prompt_token_ids == [1, 2, 3]
    view = parse(
        api,
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [image_part(data_uri(PNG)), {"type": "text", "text": "x"}]}
            ],
        },
    )
    assert [a.width for a in view.assets] == [1280] and view.parts[-1] == "x\n"
    assert view.assets[0].field == "messages[0].content[0].image_url.url"


@pytest.mark.parametrize(
    ("doc", "param"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": "a", "messages": []}, "messages"),
        ({"model": "m", "input": {"a": 1}}, "input"),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content[0]",
        ),
    ],
)
def test_pooling_mistakes_are_400s_naming_the_field(doc: dict[str, Any], param: str) -> None:
    assert refused(Api.EMBEDDINGS, orjson.dumps(doc)).param == param
