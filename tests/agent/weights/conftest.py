from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from llmgw.sim.hub import HubHandle
from tests.agent.installs.release import Release, release_server
from tests.agent.weights.hubkit import serve_hub
from tests.agent.weights.kit import Pki, make_pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def origin() -> Iterator[Release]:
    """An origin on loopback; each test puts its files in it."""
    with release_server(Release()) as r:
        yield r


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[HubHandle]:
    async for h in serve_hub(tmp_path / "model"):
        yield h


@pytest.fixture
async def gated_hub(tmp_path: Path) -> AsyncIterator[HubHandle]:
    async for h in serve_hub(tmp_path / "model", gated=True):
        yield h
