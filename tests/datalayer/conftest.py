"""Fixtures of the data-layer tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from support.kubeapi import FakeKubeAPI


@pytest.fixture
async def api() -> AsyncIterator[FakeKubeAPI]:
    """A started loopback server speaking the Kubernetes API's list/watch protocol."""
    server = FakeKubeAPI()
    await server.start()
    yield server
    await server.stop()
