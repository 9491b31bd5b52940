"""Who may speak to this cluster: API keys (made, changed, revoked, their names as last read) and the nodes and node
certificates revoked. Keys live in the store; what is kept here is what routers and views read without a store
read (the keys' version, their names) and the revocations every heartbeat is checked against."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from llmgw.control.storage.storage import Storage
from llmgw.control.tenants.limit_counters import LimitCounters
from llmgw.core import limits as key_limits
from llmgw.router.keys import new_key
from llmgw.store.base import ApiKeyRecord, Revocation, Store, UsageTotal

Spent = list[tuple[key_limits.Period, float, list[UsageTotal]]]


def spent_by_period(store: Store, now: float, totals: list[UsageTotal] | None) -> Spent:
    """What keys spent, as the store's aggregates say: this day and this month (hourly), and in all."""
    out: Spent = []
    for period in ("day", "month"):
        start = key_limits.period_start(period, now)
        out.append((period, start, store.usage_recent(start)))
    out.append(("total", 0.0, store.usage_totals() if totals is None else totals))
    return out


class Credentials:
    def __init__(self, storage: Storage, limit_counters: LimitCounters) -> None:
        self._storage = storage
        self._limit_counters = limit_counters
        self.keys_version = 0  # bumped when API keys change, so routers reload them
        self._keys: tuple[int, dict[str, ApiKeyRecord], dict[str, str]] = (-1, {}, {})
        self._keys_lock = asyncio.Lock()  # a key's read-modify-write (update, revoke) is never interleaved
        self.revoked_nodes: dict[str, Revocation] = {}
        self.revoked_serials: dict[str, Revocation] = {}
        self.revocations_version = 0  # bumped when revocations change: every node's desired state names them

    # API keys
    def keys_changed(self) -> None:
        """Keys changed elsewhere (another server sharing the store): routers read them again."""
        self.keys_version += 1

    def key_names(self) -> dict[str, str] | None:
        """Key id -> name as last read; None when keys changed since (refresh_key_names reads them again)."""
        version, _, names = self._keys
        return names if version == self.keys_version else None

    def refresh_key_names(self) -> dict[str, str]:
        """A store read: call it off the event loop (storage.read)."""
        version = self.keys_version
        keys = {k.id: k for k in self._storage.store.list_keys()}
        names = {k: r.name for k, r in keys.items()}
        self._keys = (version, keys, names)
        return names

    def known_key_names(self) -> dict[str, str]:
        """The key names last known, however old: for a view that must not wait on the store."""
        return self._keys[2]

    async def key_record(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id as the store has it now (read again, off the loop, when keys changed)."""
        if self._keys[0] != self.keys_version:
            await self._storage.read(self.refresh_key_names)
        return self._keys[1].get(key_id)

    async def create_key(self, name: str, models: list[str],
                         limits: key_limits.KeyLimits | None = None) -> tuple[str, ApiKeyRecord]:
        raw, rec = new_key(name, models, self._storage.clock)
        rec.limits = limits
        await self._storage.writer.run(self._storage.store.put_key, rec)
        self._key_written(rec)
        return raw, rec

    async def update_key(self, key_id: str, update: dict[str, Any]) -> ApiKeyRecord | str:
        """A key's new limits or models, from now on (routers reload keys when keys_version moves); or why not.
        Read and written under the keys' lock, so a revocation landing meanwhile is never written over."""
        store = self._storage.store
        async with self._keys_lock:
            key = next((k for k in await self._storage.read(store.list_keys) if k.id == key_id), None)
            if key is None:
                return f"no key with id {key_id}"
            if key.revoked_at is not None:
                return f"key {key_id} is revoked"
            new = key.model_copy(update=update)
            await self._storage.writer.run(store.put_key, new)
            self._key_written(new)
        if "limits" in update:  # a budget added or moved to another period counts what was spent before the change
            now = self._storage.clock.now()
            for period, start, spent in await self._storage.read(spent_by_period, store, now, None):
                self._limit_counters.seed(period, start, [t for t in spent if t.key_id == key_id])
        return new

    def _key_written(self, rec: ApiKeyRecord) -> None:
        """Keys changed (routers read them again); what this process knows of them follows without a store read,
        so a page view or a scrape never waits on the store for a name (a store outage would hold it)."""
        version, keys, names = self._keys
        fresh = version == self.keys_version
        self.keys_version += 1
        if fresh:
            self._keys = (self.keys_version, {**keys, rec.id: rec}, {**names, rec.id: rec.name})

    async def revoke_keys(self, match: Callable[[ApiKeyRecord], bool]) -> list[str]:
        """Revoke every live key that matches; their ids."""
        async with self._keys_lock:
            return await self._revoke_keys(match)

    async def _revoke_keys(self, match: Callable[[ApiKeyRecord], bool]) -> list[str]:
        now = self._storage.clock.now()
        done = []
        for k in await self._storage.read(self._storage.store.list_keys):
            if k.revoked_at is None and match(k):
                await self._storage.writer.run(self._storage.store.put_key, k.model_copy(update={"revoked_at": now}))
                done.append(k.id)
        if done:
            self.keys_version += 1
        return done

    # nodes and node certificates
    def adopt_revocations(self, records: list[Revocation]) -> None:
        for rv in records:
            (self.revoked_serials if rv.serial else self.revoked_nodes)[rv.serial or rv.node_id] = rv
        self.revocations_version += 1

    def revoked(self) -> list[str]:
        """Node ids and certificate serials cut off, as a node is told them (and weights are refused to them)."""
        return sorted(self.revoked_nodes) + sorted(self.revoked_serials)

    def refusal(self, node_id: str, serial: str) -> str:
        """Why this node, speaking with this certificate, is cut off; "" when it is not."""
        rv = self.revoked_nodes.get(node_id)
        if rv is not None:
            return f"node {node_id} is revoked" + (f": {rv.reason}" if rv.reason else "")
        rv = self.revoked_serials.get(serial)  # a serial names one certificate, whatever node it is said to be for
        if rv is not None:
            return f"certificate {serial} of node {node_id} is revoked" + (f": {rv.reason}" if rv.reason else "")
        return ""

    async def revoke(self, node_id: str, serial: str, reason: str) -> str:
        """Cut a node off (serial "") or one of its certificates: written first (the store's failure is raised, so
        the operator is told it is done only once it outlives a restart), then kept here. What it says."""
        rv = Revocation(node_id=node_id, serial=serial, at=self._storage.clock.now(), reason=reason)
        await self._storage.writer.run(self._storage.store.put_revocation, rv)
        self.revocations_version += 1
        if serial:
            self.revoked_serials[serial] = rv
            return f"certificate {serial} of node {node_id} revoked" + (f": {reason}" if reason else "")
        self.revoked_nodes[node_id] = rv
        return f"node {node_id} revoked" + (f": {reason}" if reason else "")
