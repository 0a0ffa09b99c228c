"""Fixtures for every test folder (helpers live in the ``support`` package)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from support.redis_server import RedisServer

# The suite runs on shared 2-core machines: a property test's example can take far longer than
# Hypothesis's 200 ms deadline there, and generating its data can trip the too-slow health
# check, neither of which says anything about the property. Tests that set their own
# ``settings`` inherit these (a profile loaded here is the default for every decorator below).
settings.register_profile("shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("shared-machine")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port, for one test."""
    with RedisServer() as server:
        yield server
