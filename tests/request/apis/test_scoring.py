"""parse_request on score and rerank: one query paired with each document, images included."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mmgate.request import Api
from support.apis import parse, refused
from support.bodies import data_uri, image, image_part

PNG = image("PNG", 1280, 720)


@pytest.mark.parametrize(
    "sides", [("queries", "documents"), ("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2")]
)
def test_score_pairs_one_query_with_each_document(sides: tuple[str, str]) -> None:
    first, second = sides
    view = parse(Api.SCORE, {"model": "m", first: "q ", second: ["d1", "d2"]})
    assert view.parts == ["q d1", "q d2"] and view.extra["prompt_count"] == 2 and view.max_tokens == 0
    assert parse(Api.SCORE, {"model": "m", first: ["a ", "b "], second: ["1", "2"]}).parts == ["a 1", "b 2"]


def test_rerank_documents_may_hold_images() -> None:
    doc = {
        "model": "m",
        "query": "q ",
        "documents": ["d", {"content": [image_part(data_uri(PNG))]}],
        "top_n": 1,
    }
    view = parse(Api.RERANK, doc)
    assert view.parts[:2] == ["q d", "q "] and view.assets[0].field == "documents[1].content[0].image_url.url"


@pytest.mark.parametrize(
    ("api", "doc", "param"),
    [
        (Api.SCORE, {"model": "m", "queries": "q"}, "queries"),
        (Api.SCORE, {"model": "m"}, "queries"),
        (Api.SCORE, {"model": "m", "queries": ["a", "b"], "documents": ["1", "2", "3"]}, "documents"),
        (Api.SCORE, {"model": "m", "queries": [], "documents": ["1"]}, "queries"),
        (Api.SCORE, {"model": "m", "text_1": 1, "text_2": "x"}, "text_1"),
        (Api.RERANK, {"model": "m", "documents": ["a"]}, "query"),
        (Api.RERANK, {"model": "m", "query": "q"}, "documents"),
        (Api.RERANK, {"model": "m", "query": "q", "documents": []}, "documents"),
        (
            Api.RERANK,
            {"model": "m", "query": {"content": [{"type": "nope"}]}, "documents": ["a"]},
            "query.content[0].type",
        ),
    ],
)
def test_scoring_mistakes_are_400s_naming_the_field(api: Api, doc: dict[str, Any], param: str) -> None:
    assert refused(api, orjson.dumps(doc)).param == param
