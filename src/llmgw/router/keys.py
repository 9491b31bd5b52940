"""API keys: shown once, stored only as a hash, found by prefix and compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from llmgw.core.clock import Clock
from llmgw.store.base import ApiKeyRecord, Store

KEY_PREFIX = "llmgw-"
PREFIX_LEN = len(KEY_PREFIX) + 8


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
    """The keys in memory, indexed by prefix. Reloaded from the store when keys change."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.by_prefix: dict[str, list[ApiKeyRecord]] = {}

    def reload(self) -> None:
        index: dict[str, list[ApiKeyRecord]] = {}
        for k in self.store.list_keys():
            index.setdefault(k.prefix, []).append(k)
        self.by_prefix = index

    def check(self, raw: str) -> ApiKeyRecord | None:
        """The live key this raw string is, or None. Revoked keys are None too."""
        if not raw.startswith(KEY_PREFIX) or len(raw) > 256:
            return None
        try:
            digest = hash_key(raw)
        except UnicodeEncodeError:
            return None  # bytes that are not UTF-8 (kept by the HTTP parser as surrogates) are no key of ours
        for k in self.by_prefix.get(raw[:PREFIX_LEN], ()):
            if hmac.compare_digest(k.hash, digest) and k.revoked_at is None:
                return k
        return None
