"""API keys on their own: their shape, and which raw strings the key ring takes for which key (a real SQLite
store). The router's tests use keys end to end; these hold the rules a mutation-testing run found unguarded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmgw.core.clock import FakeClock
from llmgw.router.keys import KEY_PREFIX, PREFIX_LEN, KeyRing, hash_key, new_key
from llmgw.store.base import ApiKeyRecord
from llmgw.store.sqlite import SqliteStore


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "s.db").open()


def ring_with(store: SqliteStore, *recs: ApiKeyRecord) -> KeyRing:
    for rec in recs:
        store.put_key(rec)
    ring = KeyRing(store)
    ring.reload()
    return ring


def record_for(raw: str, id: str) -> ApiKeyRecord:
    return ApiKeyRecord(id=id, name="n", prefix=raw[:PREFIX_LEN], hash=hash_key(raw), created_at=1.0)


def test_a_new_key_has_its_shape_and_carries_its_models() -> None:
    raw, rec = new_key("alice", ["m"], FakeClock())
    assert re.fullmatch(r"llmgw-[A-Za-z0-9_-]{43}", raw), raw  # 32 random bytes
    assert re.fullmatch(r"[0-9a-f]{12}", rec.id), rec.id
    assert (rec.name, rec.models, rec.prefix, rec.hash) == ("alice", ["m"], raw[:PREFIX_LEN], hash_key(raw))
    assert rec.created_at == FakeClock().now() and rec.revoked_at is None


def test_only_the_whole_key_opens_it_and_never_once_revoked(store: SqliteStore) -> None:
    raw, rec = new_key("alice", [], FakeClock())
    ring = ring_with(store, rec)
    assert ring.check(raw) == rec
    assert ring.check(raw[:PREFIX_LEN] + "x" * (len(raw) - PREFIX_LEN)) is None  # its prefix, another secret
    assert ring.check(raw[:-1]) is None
    assert ring.check(KEY_PREFIX + "unknown-prefix-" + "x" * 30) is None  # a prefix nobody holds
    store.put_key(rec.model_copy(update={"revoked_at": 2.0}))
    ring.reload()
    assert ring.check(raw) is None


def test_a_ring_not_yet_loaded_knows_no_key(store: SqliteStore) -> None:
    raw, rec = new_key("alice", [], FakeClock())
    store.put_key(rec)
    assert KeyRing(store).check(raw) is None


def test_a_string_without_the_prefix_or_over_256_characters_is_no_key(store: SqliteStore) -> None:
    """Checked before anything is hashed: even a record whose hash matched would not make one a key."""
    at_limit = KEY_PREFIX + "a" * (256 - len(KEY_PREFIX))
    over = KEY_PREFIX + "b" * (257 - len(KEY_PREFIX))
    no_prefix = "sk-" + "c" * 40
    ring = ring_with(store, record_for(at_limit, id="k1"), record_for(over, id="k2"),
                     record_for(no_prefix, id="k3"))
    assert ring.check(at_limit) is not None
    assert ring.check(over) is None
    assert ring.check(no_prefix) is None
