"""Authenticate while API keys changed and cannot be read again (router/auth.py): the real router over a real control
plane on SQLite, whose keys table another connection takes out of reach, as a store that is away fails every read.
The same over PostgreSQL, stopped: tests/control/ha/test_keys_through_a_store_outage.py."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.errors import StoreError
from llmgw.router.keys import new_key
from llmgw.router.reread import RETRY_S
from llmgw.store.base import ApiKeyRecord
from tests.harness import await_until, plane_in, router_over


@contextlib.contextmanager
def keys_unreadable(plane: ControlPlane, path: Path) -> Iterator[None]:
    """Every read of the keys fails (their table renamed by another connection) until this ends."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("ALTER TABLE api_keys RENAME TO api_keys_away")
        with pytest.raises(StoreError):
            plane.store.list_keys()
        yield
        db.execute("ALTER TABLE api_keys_away RENAME TO api_keys")
    finally:
        db.close()


async def answer(url: str, key: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url + "/v1/models",
                                                   headers={"Authorization": f"Bearer {key}"}) as r:
        return r.status, "" if r.status == 200 else str((await r.json())["error"]["code"])


async def test_keys_that_cannot_be_read_again_are_checked_against_those_known(tmp_path: Path) -> None:
    """Keys changed elsewhere and cannot be read: a key known live is answered, one this server revoked (after the
    change elsewhere) is refused 401 without a read, one not known cannot be checked (503, not a 401 that calls it
    invalid); once the keys can be read, the new one is answered."""
    clock = FakeClock()
    plane = plane_in(tmp_path, clock)
    async with router_over(plane) as (url, _):
        known, _ = await plane.credentials.create_key("known", [])
        gone, rec = await plane.credentials.create_key("gone", [])
        assert await answer(url, known) == (200, "") and await answer(url, gone) == (200, "")
        elsewhere, other = new_key("elsewhere", [], plane.clock)
        plane.store.put_key(other)  # as a server beside this one writes it
        plane.credentials.keys_changed()  # as this server's follow pass hears of it
        assert await plane.credentials.revoke_keys(lambda k: k.id == rec.id) == [rec.id]
        with keys_unreadable(plane, tmp_path / "s.db"):
            assert await answer(url, known) == (200, "")  # served: keys failing to be read are no reason to refuse
            assert await answer(url, gone) == (401, "invalid_api_key")  # revoked here: known without a read
            assert await answer(url, elsewhere) == (503, "store_unavailable")
            assert await answer(url, "llmgw-not-a-key-at-all") == (503, "store_unavailable")
        clock.advance(RETRY_S)  # the failed read is tried again: the keys are read
        await await_until(lambda: _answered(url, elsewhere), 5, "the key made elsewhere answered once readable")
        assert await answer(url, "llmgw-not-a-key-at-all") == (401, "invalid_api_key")


async def test_a_failed_read_is_tried_again_later_not_on_every_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Keys changed elsewhere and cannot be read: many requests make one read, the next comes once RETRY_S has
    passed on the clock, and the failure and the recovery are each said once. The keys were read on every request
    before (a store failing at once, as this one does)."""
    clock = FakeClock()
    plane = plane_in(tmp_path, clock)
    reads: list[float] = []
    list_keys = plane.store.list_keys

    def counted() -> list[ApiKeyRecord]:
        reads.append(plane.clock.monotonic())
        return list_keys()

    monkeypatch.setattr(plane.store, "list_keys", counted)
    async with router_over(plane) as (url, _):
        known, _ = await plane.credentials.create_key("known", [])
        assert await answer(url, known) == (200, "")
        elsewhere, other = new_key("elsewhere", [], plane.clock)
        plane.store.put_key(other)
        plane.credentials.keys_changed()
        with caplog.at_level(logging.WARNING, "llmgw.router.reread"), keys_unreadable(plane, tmp_path / "s.db"):
            reads.clear()
            for _ in range(5):
                assert await answer(url, known) == (200, "")
                assert await answer(url, elsewhere) == (503, "store_unavailable")
            assert len(reads) == 1, reads
            clock.advance(RETRY_S)
            assert await answer(url, elsewhere) == (503, "store_unavailable")  # no request waits on a retry
            await await_until(lambda: len(reads) == 2, 5, "the read tried again")
            for _ in range(3):
                assert await answer(url, known) == (200, "")
            assert len(reads) == 2, reads
        clock.advance(RETRY_S)
        await await_until(lambda: _answered(url, elsewhere), 5, "the key made elsewhere answered once readable")
        assert len(reads) == 3, reads
    said = [r.getMessage() for r in caplog.records]
    assert sum("cannot be read now" in w for w in said) == 1 and sum("read again" in w for w in said) == 1, said


async def test_a_key_this_server_wrote_needs_no_read(tmp_path: Path) -> None:
    """Keys made, changed and revoked through this server are known to its router at once: with every read failing,
    a key made is answered and one revoked refused."""
    clock = FakeClock()
    plane = plane_in(tmp_path, clock)
    async with router_over(plane) as (url, _):
        first, _ = await plane.credentials.create_key("first", [])
        assert await answer(url, first) == (200, "")  # the router has read the keys once
        made, rec = await plane.credentials.create_key("made", [])
        await plane.credentials.update_key(rec.id, {"models": ["m"]})
        assert await plane.credentials.revoke_keys(lambda k: k.id != rec.id) != []
        with keys_unreadable(plane, tmp_path / "s.db"):
            assert await answer(url, made) == (200, "")
            assert await answer(url, first) == (401, "invalid_api_key")


async def test_a_router_workers_admission_goes_on_with_the_keys_known(tmp_path: Path) -> None:
    """What a router worker's admission asks (Credentials.key_record) while keys changed and cannot be read: the
    record known for a known key; for one not known, the store's failure (answered as limits unavailable)."""
    clock = FakeClock()
    plane = plane_in(tmp_path, clock)
    _, rec = await plane.credentials.create_key("known", [])
    assert await plane.credentials.key_record(rec.id) == rec
    plane.credentials.keys_changed()
    with keys_unreadable(plane, tmp_path / "s.db"):
        assert await plane.credentials.key_record(rec.id) == rec
        with pytest.raises(StoreError):  # not None: that would call a key made elsewhere invalid
            await plane.credentials.key_record("not-known")


async def _answered(url: str, key: str) -> bool:
    return (await answer(url, key))[0] == 200
