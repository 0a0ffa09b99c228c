"""How every long-running mmgate process (gateway, endpoint picker, sidecar, demo) writes its log.

Logs are one JSON object per line on stderr, built from explicit fields only (a record's
``fields`` dict): bodies, media payloads and headers (API keys) are never passed to the logger, so
they cannot leak into it. A line-oriented JSON log is what Kubernetes log shippers (Fluent Bit,
Vector, the Cloud Logging agent) parse without a custom pattern.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, plus the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def configure_logging(level: str = "info", *, json: bool = True) -> None:
    """Route mmgate's loggers to stderr, as JSON lines unless ``json`` is False."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if json else logging.Formatter("%(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger("mmgate")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
