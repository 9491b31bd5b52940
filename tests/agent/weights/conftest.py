from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.installs.release import Release, release_server
from tests.agent.weights.kit import Pki, make_pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def origin() -> Iterator[Release]:
    """An origin on loopback; each test puts its files in it."""
    with release_server(Release()) as r:
        yield r
