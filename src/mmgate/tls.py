"""The one TLS client context the gateway uses towards model servers (forwarding and scraping).

Built once at startup from ``mmgate.upstreamTLS`` so that the proxy and the metrics scraper
trust exactly the same certificates: the system store by default, a private CA bundle when
``caFile`` is set, nothing checked only when ``insecureSkipVerify`` says so explicitly.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from mmgate.config.strict import ConfigError

__all__ = ["CA_OPTION", "client_context"]

CA_OPTION = "mmgate.upstreamTLS.caFile"
"""Named in errors so an operator knows which key makes a private CA trusted."""


def client_context(ca_file: str | None = None, *, insecure_skip_verify: bool = False) -> ssl.SSLContext:
    """A client context verifying certificates and hostnames (against ``ca_file`` when given).

    Raises :class:`ConfigError` when the CA file is missing or holds no usable certificate.
    """
    if ca_file is not None:
        path = Path(ca_file).expanduser()
        if not path.is_file():
            raise ConfigError(f"CA file {ca_file!r} does not exist or is not a file", path=CA_OPTION)
        try:
            context = ssl.create_default_context(cafile=str(path))
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(
                f"CA file {ca_file!r} holds no usable PEM certificate ({exc})", path=CA_OPTION
            ) from None
    else:
        context = ssl.create_default_context()
    if insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
