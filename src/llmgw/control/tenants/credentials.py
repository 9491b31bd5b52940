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
from llmgw.core.errors import StoreError
from llmgw.router.keys import KeysWritten, new_key
from llmgw.router.reread import Reread
from llmgw.store.base import ApiKeyRecord, Revocation, Store, UsageTotal

Spent = list[tuple[key_limits.Period, float, list[UsageTotal]]]
KEYS_WRITTEN_KEPT = 256  # this server's key writes kept for its router; one further behind reads the store


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
        self.keys_version = 0  # moves when API keys change, so routers bring theirs up to date
        self._keys: tuple[int, dict[str, ApiKeyRecord], dict[str, str]] = (-1, {}, {})  # as read: (version, ...)
        self._keys_learned = -1  # the version of the last key this server wrote that _keys took in
        self._keys_lock = asyncio.Lock()  # a key's read-modify-write (update, revoke) is never interleaved
        self._written: list[tuple[int, ApiKeyRecord]] = []  # this server's key writes: (the version each made, key)
        self._written_from = 0  # _written holds every write of this server's after this version
        self._own_revs: set[int] = set()  # the store's keys revisions this server's writes made, not yet followed
        self._reread = Reread(self._read_keys, "API keys (a router worker's admission)", storage.clock)
        self.revoked_nodes: dict[str, Revocation] = {}
        self.revoked_serials: dict[str, Revocation] = {}
        self.revocations_version = 0  # bumped when revocations change: every node's desired state names them

    # API keys
    def keys_changed(self) -> None:
        """Keys changed elsewhere (another server sharing the store): routers read them again."""
        self.keys_version += 1

    def keys_moved(self, before: int, after: int) -> None:
        """The store's keys revision moved from `before` to `after` (the follow pass): keys changed elsewhere, unless
        every revision between is one this server's own writes made (known here already: no store read for them)."""
        own = self._own_revs
        if after < before or after - before > len(own) or any(r not in own for r in range(before + 1, after + 1)):
            self.keys_changed()
        self._own_revs = {r for r in own if r > after}

    def keys_since(self, version: int) -> KeysWritten | None:
        """The keys this server wrote after `version`, and the version a reader at `version` is up to date at with
        them (router/keys.py); None when it is further behind than is kept (it reads the store)."""
        if version < self._written_from:
            return None
        written = [(v, rec) for v, rec in self._written if v > version]
        through, mine = version, {v for v, _ in written}
        while through + 1 in mine:  # up to the first change made elsewhere
            through += 1
        return KeysWritten(through, written)

    def key_names(self) -> dict[str, str] | None:
        """Key id -> name as last read (with this server's writes since); None when keys changed elsewhere since
        (refresh_key_names reads them again)."""
        return self._keys[2] if self._catch_up() else None

    def refresh_key_names(self) -> dict[str, str]:
        """A store read: call it off the event loop (storage.read)."""
        version = self.keys_version
        keys = {k.id: k for k in self._storage.store.list_keys()}
        names = {k: r.name for k, r in keys.items()}
        self._keys, self._keys_learned = (version, keys, names), version  # writes after it are taken in again
        return names

    def known_key_names(self) -> dict[str, str]:
        """The key names last known, however old: for a view that must not wait on the store."""
        self._catch_up()
        return self._keys[2]

    async def key_record(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id as last known: read again when keys changed elsewhere, that read waited for a short
        while at most (router/reread.py), the record known doing meanwhile. Raises StoreError for a key not known
        while the keys are not up to date: it cannot be checked now."""
        if not self._catch_up():
            await self._reread.ask()
        current = self._catch_up()
        rec = self._keys[1].get(key_id)
        if rec is None and not current:
            raise StoreError(f"key {key_id} cannot be checked now: keys changed and the store cannot be read "
                             f"({self._reread.failing or 'it is slow to answer'})")
        return rec

    async def _read_keys(self) -> None:
        await self._storage.read(self.refresh_key_names)

    def _catch_up(self) -> bool:
        """Whether the keys as last read are up to date, this server's writes since taken in (as a router's are)."""
        version, keys, names = self._keys
        if version == self.keys_version:
            return True
        written = self.keys_since(version)
        if written is None:
            return False
        new = [rec for v, rec in written.keys if v > self._keys_learned]
        if new:
            keys, names = {**keys, **{r.id: r for r in new}}, {**names, **{r.id: r.name for r in new}}
            self._keys_learned = written.keys[-1][0]
        self._keys = (written.through, keys, names)
        return written.through == self.keys_version

    async def create_key(self, name: str, models: list[str],
                         limits: key_limits.KeyLimits | None = None) -> tuple[str, ApiKeyRecord]:
        raw, rec = new_key(name, models, self._storage.clock)
        rec.limits = limits
        self._key_written(rec, await self._storage.writer.run(self._storage.store.put_key, rec))
        return raw, rec

    async def update_key(self, key_id: str, update: dict[str, Any]) -> ApiKeyRecord | str:
        """A key's new limits or models, from now on (routers take it in when keys_version moves); or why not.
        Read and written under the keys' lock, so a revocation landing meanwhile is never written over."""
        store = self._storage.store
        async with self._keys_lock:
            key = next((k for k in await self._storage.read(store.list_keys) if k.id == key_id), None)
            if key is None:
                return f"no key with id {key_id}"
            if key.revoked_at is not None:
                return f"key {key_id} is revoked"
            new = key.model_copy(update=update)
            self._key_written(new, await self._storage.writer.run(store.put_key, new))
        if "limits" in update:  # a budget added or moved to another period counts what was spent before the change
            now = self._storage.clock.now()
            for period, start, spent in await self._storage.read(spent_by_period, store, now, None):
                self._limit_counters.seed(period, start, [t for t in spent if t.key_id == key_id])
        return new

    def _key_written(self, rec: ApiKeyRecord, rev: int) -> None:
        """A key this server wrote (the store's keys revision `rev` its write made): its router and views take it in
        without a store read (a request, a page view or a scrape never waits on the store for it; a store outage
        would hold them), and the follow pass knows that revision for this server's own."""
        self.keys_version += 1
        self._written.append((self.keys_version, rec))
        if len(self._written) > KEYS_WRITTEN_KEPT:
            self._written_from = self._written.pop(0)[0]
        if self._storage.shared:  # alone on its store, no follow pass counts revisions
            self._own_revs.add(rev)

    async def revoke_keys(self, match: Callable[[ApiKeyRecord], bool]) -> list[str]:
        """Revoke every live key that matches; their ids."""
        async with self._keys_lock:
            return await self._revoke_keys(match)

    async def _revoke_keys(self, match: Callable[[ApiKeyRecord], bool]) -> list[str]:
        now = self._storage.clock.now()
        done = []
        for k in await self._storage.read(self._storage.store.list_keys):
            if k.revoked_at is None and match(k):
                revoked = k.model_copy(update={"revoked_at": now})
                self._key_written(revoked, await self._storage.writer.run(self._storage.store.put_key, revoked))
                done.append(k.id)
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
