"""Waiting for what a background task makes true, on a shared and loaded machine."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], what: str = "the condition", limit_s: float = 30.0) -> None:
    """Poll ``condition`` every 10 ms until it holds. The limit only catches a hang (a stuck watch,
    a subscriber that never applies): it is no statement about speed, so it is generous."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.01)
