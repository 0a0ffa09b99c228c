"""Fixtures for every test folder (helpers live in the ``support`` package)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.redis_server import RedisServer


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port, for one test."""
    with RedisServer() as server:
        yield server
