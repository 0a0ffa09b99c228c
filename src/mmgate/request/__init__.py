"""Understanding a request once: parts, media assets, sizes, content identities."""

from mmgate.request.view import Api, MediaAsset, Modality, RequestView, Source

__all__ = ["Api", "MediaAsset", "Modality", "RequestView", "Source"]
