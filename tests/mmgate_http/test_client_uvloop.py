"""The same client scenarios on uvloop, the loop the gateway serves on (pytest-asyncio uses asyncio).

uvloop's transports differ from asyncio's in ways the pool depends on (types, buffering, when
connection_lost runs), so every scenario runs on both.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from mmgate_http import test_client as basic
from mmgate_http import test_client_errors as errors


def _scenarios() -> list[Any]:
    cases = []
    for module in (basic, errors):
        for name, test in vars(module).items():
            if not name.startswith("test_") or not inspect.iscoroutinefunction(test):
                continue
            marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
            if not marks:
                cases.append(pytest.param(test, (), id=name))
                continue
            for values in marks[0].args[1]:
                args = values if isinstance(values, tuple) else (values,)
                cases.append(pytest.param(test, args, id=f"{name}[{args[0]!s:.20}]"))
    return cases


@pytest.mark.parametrize(("scenario", "args"), _scenarios())
def test_on_uvloop(scenario: Callable[..., Awaitable[None]], args: tuple[Any, ...]) -> None:
    async def main() -> None:
        await scenario(*args)

    uvloop.run(main())
