from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg import Postgres

# the test tiers (tests/tiers.py: `--unit`, the `real` mark), the time per directory (tests/timing.py); pytester
# tests the tier rule itself
pytest_plugins = ["pytester", "tests.tiers", "tests.timing"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """One real PostgreSQL for the session (tests/pg.py); each test takes a fresh database of it."""
    pg = Postgres().start()
    try:
        yield pg
    finally:
        pg.stop()
