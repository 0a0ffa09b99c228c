"""The request controller's parse step: the seam where a request body becomes a :class:`RequestView`.

The controller calls one ``Parser`` per request (``RequestController.parse``) and knows nothing
of how bodies are decoded; the gateway and the disaggregation sidecar both build theirs with
:func:`make_parser`, so a body the gateway accepts is read the same way beside the decode pod.
This mirrors the endpoint picker of the Gateway API Inference Extension, where the body parser is
a declared plugin seam of request control rather than part of a transport.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from mmgate.errors import RequestError
from mmgate.request import Api, RequestView
from mmgate.request.assets import HINT_HEADERS
from mmgate.request.limits import Limits
from mmgate.request.media_uuids import with_media_uuids
from mmgate.request.parse import parse_request

Parser = Callable[[bytes, Mapping[str, str], Api], RequestView]
"""``(body, headers, api) -> view``; raises :class:`RequestError` for a client's mistake (a 4xx)."""


PARSED_HEADERS: Final = frozenset(HINT_HEADERS)
"""The request headers the parse step reads, each as one value: a server in front of it refuses
their repeats (``ServerLimits.single_valued_headers``), or it would read the first copy while the
model server may read another."""


def make_parser(limits: Limits) -> Parser:
    """The parse step under ``limits``; with ``limits.own_media_uuids`` the view's ``body`` (what
    is forwarded) gains the media parts' uuids (``mmgate.mediaUuids``)."""

    def parse(body: bytes, headers: Mapping[str, str], api: Api) -> RequestView:
        try:
            view = parse_request(body, headers, api=api, limits=limits)
        except RecursionError:  # JSON nested thousands deep: the decoder gives up, the client erred
            raise RequestError("The request body is nested too deeply.", param="body") from None
        parts = view.parts
        # The prompt builder merges text, so a prompt without media is at most one string: no
        # part to write a uuid on, and no call to find that out on every text request.
        if limits.own_media_uuids and (len(parts) > 1 or (parts and not isinstance(parts[0], str))):
            view.body = with_media_uuids(view)
        return view

    return parse
