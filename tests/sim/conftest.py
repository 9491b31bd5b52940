"""Fixtures for sim tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest_asyncio

from .procs import EngineProc

StartEngine = Callable[..., Awaitable[EngineProc]]


@pytest_asyncio.fixture
async def start_engine() -> AsyncIterator[StartEngine]:
    """`await start_engine("--model", "m", ...)` starts a sim engine; every one still running is killed at teardown."""
    started: list[EngineProc] = []

    async def start(*args: str) -> EngineProc:
        engine = await EngineProc.spawn(*args)
        started.append(engine)
        return engine

    yield start
    for engine in started:
        await engine.stop()
