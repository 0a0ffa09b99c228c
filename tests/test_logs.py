"""The process log: one JSON object per line, the record's explicit fields merged in."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
import pytest

from mmgate.logs import configure_logging


@pytest.fixture
def mmgate_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("mmgate")
    saved = logger.handlers[:], logger.level, logger.propagate
    yield logger
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]


def test_json_lines_carry_the_fields_and_the_level_filters(
    mmgate_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("warning")
    child = logging.getLogger("mmgate.disagg")
    child.info("dropped below the level")
    child.warning("leg failed: %s", "timeout", extra={"fields": {"endpoint": "10.0.0.1:8000", "attempt": 2}})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    doc = orjson.loads(lines[0])
    assert doc["level"] == "warning" and doc["logger"] == "mmgate.disagg"
    assert doc["msg"] == "leg failed: timeout"
    assert doc["endpoint"] == "10.0.0.1:8000" and doc["attempt"] == 2


def test_plain_text_when_json_is_off(
    mmgate_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("info", json=False)
    logging.getLogger("mmgate.demo").info("ready")
    assert capsys.readouterr().err == "INFO mmgate.demo: ready\n"
