"""A revocation the operator is told succeeded is in the store before the answer: a reason or node id the store
could not keep (a NUL byte, any control character) is refused at the API with a 400 that says why, and a write the
store refuses is an error, never a 200 that vanishes at the next restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from llmgw.config.server import ModelSpec, ServerConfig, StoreConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.control.storage.writer import StoreWriter
from llmgw.core.clock import FakeClock
from llmgw.core.errors import StoreRejected
from llmgw.store.postgres import PostgresStore
from tests.harness import InProcessServer, plan
from tests.pg import PASSWORD, Postgres


def _revocations(dsn: str) -> list[tuple[str, str, str]]:
    store = PostgresStore(dsn, PASSWORD).open()
    try:
        return [(r.node_id, r.serial, r.reason) for r in store.list_revocations()]
    finally:
        store.close()


async def _revoke(p: Any, node: str, body: dict[str, str]) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {p.token_file.read_text().strip()}"}
    async with aiohttp.ClientSession(headers=headers) as s, \
            s.post(f"{p.admin}/api/nodes/{node}/revoke", json=body) as r:
        return r.status, await r.text()


def _on_postgres(tmp_path: Path, dsn: str) -> Any:
    (tmp_path / "pg.password").write_text(PASSWORD + "\n")
    return plan(tmp_path, [], [], extra_server={"store": {"kind": "postgres", "dsn": dsn,
                                                          "password_file": "pg.password", "path": "state/x.db"}})


@pytest.mark.parametrize("reason", ["stolen\x00laptop", "a\x1b[2Jb", "two\nlines", "tab\there", "bell\x07",
                                    "c1\x85", "lone \ud800 surrogate"])
async def test_a_reason_the_store_could_not_keep_is_refused_and_nothing_is_revoked(
        tmp_path: Path, postgres: Postgres, reason: str) -> None:
    dsn = postgres.fresh_db()
    p = _on_postgres(tmp_path, dsn)
    async with InProcessServer(p):
        status, text = await _revoke(p, "node07", {"serial": "ab12", "reason": reason})
        assert status == 400, text
        assert "reason" in text and ("control character" in text or "not text" in text), text
    assert _revocations(dsn) == []


@pytest.mark.parametrize("node", ["node%0007", "node%0A07", "..%2Fca", "-x"])
async def test_a_node_id_that_is_no_node_id_is_refused(tmp_path: Path, postgres: Postgres, node: str) -> None:
    dsn = postgres.fresh_db()
    p = _on_postgres(tmp_path, dsn)
    async with InProcessServer(p):
        status, text = await _revoke(p, node, {"serial": "ab12", "reason": "stolen"})
        assert status == 400 and "node id" in text, text
    assert _revocations(dsn) == []


async def test_a_revocation_answered_200_is_in_the_store_and_outlives_a_restart(
        tmp_path: Path, postgres: Postgres) -> None:
    dsn = postgres.fresh_db()
    p = _on_postgres(tmp_path, dsn)
    async with InProcessServer(p):
        status, text = await _revoke(p, "node07", {"serial": "ab12", "reason": "laptop stolen"})
        assert status == 200, text
        assert _revocations(dsn) == [("node07", "ab12", "laptop stolen")]  # there as the answer left, not later
    async with InProcessServer(p) as again:
        assert again.task is not None
        status, text = await _revoke(p, "node07", {"serial": "ab12", "reason": "again"})
        assert status == 200, text
    assert _revocations(dsn) == [("node07", "ab12", "again")]


async def test_a_revocation_the_store_refuses_is_an_error_and_changes_nothing(
        tmp_path: Path, postgres: Postgres) -> None:
    """Below the API's checks: whatever the store cannot keep is not taken as done (it was queued, 'dropped' by the
    writer, and the node stayed revoked only in this process's memory until a restart)."""
    dsn = postgres.fresh_db()
    spec = ModelSpec.model_validate({"name": "m", "source": "org/m", "engine": "sim"})
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[spec],
                       store=StoreConfig(kind="postgres", dsn=dsn, path=str(tmp_path / "x.db")))
    writer = StoreWriter(FakeClock())
    plane = ControlPlane(cfg, PostgresStore(dsn, PASSWORD).open(), FakeClock(), writer=writer)
    try:
        plane.load()
        with pytest.raises(StoreRejected):
            await plane.revoke("node07", "ab12", "stolen\x00laptop")
        assert plane.credentials.refusal("node07", "ab12") == ""
        assert _revocations(dsn) == []
        assert await plane.revoke("node07", "ab12", "stolen") == "certificate ab12 of node node07 revoked: stolen"
        assert plane.credentials.refusal("node07", "ab12") != "" and _revocations(dsn) == [("node07", "ab12", "stolen")]
    finally:
        writer.close()
        plane.store.close()
