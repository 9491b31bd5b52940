from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmgw.dev.cluster import Cluster


@pytest.fixture
def running() -> Iterator[list[Cluster]]:
    """Clusters a test started; every process they hold is stopped at the end, pass or fail."""
    started: list[Cluster] = []
    yield started
    for c in started:
        c.stop()
