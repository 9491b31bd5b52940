from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llmgw.store.postgres import PostgresStore
from llmgw.store.sql import SqlStore
from llmgw.store.sqlite import SqliteStore
from tests.pg import PASSWORD


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], SqlStore]]:
    """Opens (again) one store of each kind: a SQLite file, or a fresh PostgreSQL database."""
    opened: list[SqlStore] = []
    if request.param == "sqlite":
        def make() -> SqlStore:
            opened.append(SqliteStore(tmp_path / "s.db").open())
            return opened[-1]
    else:
        dsn = request.getfixturevalue("postgres").fresh_db()

        def make() -> SqlStore:
            opened.append(PostgresStore(dsn, PASSWORD).open())
            return opened[-1]
    yield make
    for s in opened:
        s.close()
