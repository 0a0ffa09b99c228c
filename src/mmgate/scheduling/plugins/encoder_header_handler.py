"""``encoder-header-handler``: tell the decode pod's sidecar which pods encode the media.

The encode-stage counterpart of llm-d's ``prefill-header-handler`` (llm-d sets this header in its
profile handler): when the ``encode`` profile ran, the upstream request carries
``x-encoder-hosts-ports``, every encode target's ``host:port`` comma-joined (the sidecar spreads
the media items over them). Created by default for a config with an encode profile.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from mmgate.scheduling.plugins._header_handler import ENCODERS_HEADER, HeaderHandler


class EncoderHeaderParams(msgspec.Struct, forbid_unknown_fields=True):
    encodeProfile: str = "encode"


class EncoderHeaderHandler(HeaderHandler[EncoderHeaderParams]):
    type_name = "encoder-header-handler"
    routing_header: ClassVar[str] = ENCODERS_HEADER

    @property
    def profile(self) -> str:
        return self.params.encodeProfile
