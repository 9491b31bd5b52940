"""Servers on one PostgreSQL database that start at once each write the catalog of their configuration. The
write replaced the catalog by deleting it and inserting every model: a second server's insert waited on the first
one's uncommitted row of the same name and then failed on the unique name, so that server did not start (a CI run:
"duplicate key value violates unique constraint models_pkey", one of three servers down)."""

from __future__ import annotations

import threading

from llmgw.config.server import ModelSpec, Profile
from llmgw.store.postgres import PostgresStore
from llmgw.store.sql import write_catalog
from tests.pg import PASSWORD, Postgres


def model(name: str, gpus: int = 1) -> ModelSpec:
    return ModelSpec(name=name, source=f"/models/{name}", engine="sim", profile=Profile(gpus_per_shard=gpus))


def test_a_catalog_written_while_another_server_writes_it_is_written(postgres: Postgres) -> None:
    dsn = postgres.fresh_db()
    store, other = PostgresStore(dsn, PASSWORD).open(), PostgresStore(dsn, PASSWORD).open()
    try:
        store.put_models([model("old")])
        failed: list[BaseException] = []

        def write() -> None:
            try:
                store.put_models([model("m", gpus=2)])
            except BaseException as e:
                failed.append(e)

        writer = threading.Thread(target=write)
        with other._tx() as tx:  # another server's write of the catalog, begun and not yet committed
            write_catalog(tx, [model("m")])
            writer.start()
            writer.join(1.0)  # this server's write waits for the other's: it cannot end before the other commits
            assert writer.is_alive(), failed
        writer.join(20)
        assert not writer.is_alive(), "the catalog write still waiting after the other server committed"
        assert failed == [], failed
        assert store.list_models() == [model("m", gpus=2)], "the later write is the catalog"
    finally:
        store.close()
        other.close()
