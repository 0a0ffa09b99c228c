"""Understanding a request once: parts, media assets, sizes, content identities."""

from mmgate.request.apis.chat import role_header
from mmgate.request.limits import DEFAULT_LIMITS, Limits
from mmgate.request.parse import parse_request
from mmgate.request.view import Api, MediaAsset, Modality, RequestView, Source

__all__ = [
    "DEFAULT_LIMITS",
    "Api",
    "Limits",
    "MediaAsset",
    "Modality",
    "RequestView",
    "Source",
    "parse_request",
    "role_header",
]
