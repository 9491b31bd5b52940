"""Two control planes on one PostgreSQL database, each with its own pool, sharing one fake clock: several servers
as the plane sees them (tests/control/ha/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.config.server import ModelSpec, ServerConfig, StoreConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.store.postgres import PostgresStore
from tests.pg import PASSWORD, Postgres

LEASE = 5.0


def config(dsn: str, tmp_path: Path) -> ServerConfig:
    spec = ModelSpec.model_validate({"name": "m", "source": "org/m", "engine": "sim", "scaling": {"min": 0, "max": 1}})
    return ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[spec], leader_lease=LEASE,
                        store=StoreConfig(kind="postgres", dsn=dsn, path=str(tmp_path / "x.db")))


@pytest.fixture
def dsn(postgres: Postgres) -> str:
    return postgres.fresh_db()


@pytest.fixture
def two(dsn: str, tmp_path: Path) -> Iterator[tuple[ControlPlane, ControlPlane, FakeClock]]:
    cfg = config(dsn, tmp_path)
    clock = FakeClock()
    planes = [ControlPlane(cfg, PostgresStore(dsn, PASSWORD).open(), clock) for _ in range(2)]
    for p in planes:
        p.load()
    yield planes[0], planes[1], clock
    for p in planes:
        p.store.close()
