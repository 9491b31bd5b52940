"""API keys: shown once, stored only as a hash, found by prefix and compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import NamedTuple

from llmgw.core.clock import Clock
from llmgw.store.base import ApiKeyRecord, Store

KEY_PREFIX = "llmgw-"
PREFIX_LEN = len(KEY_PREFIX) + 8


class KeysWritten(NamedTuple):
    """The keys a process wrote after a version (its router knows them without a store read): each with the
    version its write made, and `through`, the version a reader at that version is up to date at with them (a change
    elsewhere after it is read from the store; writes after it are known all the same)."""

    through: int
    keys: list[tuple[int, ApiKeyRecord]]


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_key(name: str, models: list[str], clock: Clock) -> tuple[str, ApiKeyRecord]:
    raw = KEY_PREFIX + secrets.token_urlsafe(32)
    rec = ApiKeyRecord(
        id=secrets.token_hex(6),
        name=name,
        prefix=raw[:PREFIX_LEN],
        hash=hash_key(raw),
        created_at=clock.now(),
        models=models,
    )
    return raw, rec


class KeyRing:
    """The keys in memory, indexed by prefix: read from the store when keys changed elsewhere, and told the keys
    this process wrote (learn) without a read."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.by_prefix: dict[str, list[ApiKeyRecord]] = {}

    def read(self) -> dict[str, list[ApiKeyRecord]]:
        """The keys as the store has them, indexed (a store read: any thread)."""
        index: dict[str, list[ApiKeyRecord]] = {}
        for k in self.store.list_keys():
            index.setdefault(k.prefix, []).append(k)
        return index

    def reload(self) -> None:
        self.by_prefix = self.read()

    def learn(self, records: list[ApiKeyRecord]) -> None:
        """Keys as this process wrote them (made, changed or revoked), each in place of what was known of it."""
        index = dict(self.by_prefix)
        for rec in records:
            index[rec.prefix] = [k for k in index.get(rec.prefix, []) if k.id != rec.id] + [rec]
        self.by_prefix = index

    def find(self, raw: str) -> ApiKeyRecord | None:
        """The key this raw string is, live or revoked, or None."""
        if not raw.startswith(KEY_PREFIX) or len(raw) > 256:
            return None
        try:
            digest = hash_key(raw)
        except UnicodeEncodeError:
            return None  # bytes that are not UTF-8 (kept by the HTTP parser as surrogates) are no key of ours
        for k in self.by_prefix.get(raw[:PREFIX_LEN], ()):
            if hmac.compare_digest(k.hash, digest):
                return k
        return None

    def check(self, raw: str) -> ApiKeyRecord | None:
        """The live key this raw string is, or None. Revoked keys are None too."""
        k = self.find(raw)
        return k if k is not None and k.revoked_at is None else None
