"""parse_request on one of vLLM's other APIs, and the 400 a client mistake gets."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mmgate.errors import RequestError
from mmgate.request import Api, parse_request


def parse(api: Api, doc: dict[str, Any]) -> Any:
    return parse_request(orjson.dumps(doc), {}, api=api)


def refused(api: Api, body: bytes, headers: dict[str, str] | None = None) -> RequestError:
    with pytest.raises(RequestError) as caught:
        parse_request(body, headers or {}, api=api)
    assert caught.value.status == 400
    return caught.value
