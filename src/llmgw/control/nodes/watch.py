"""What an agent waits on between heartbeats: a digest of the shards it is to run, and a wake-up when it changes.

The heartbeat stays the level-triggered truth (a node learns everything from its answer); this only tells a node
that its answer would differ now, so it asks at once instead of at its next interval: a shard placed for an
on-demand request starts within moments, not a heartbeat later, and a stopped one stops as soon.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable

from llmgw.records.state import ReplicaRecord

EMPTY = hashlib.blake2b(b"", digest_size=12).hexdigest()


def shard_digests(replicas: Iterable[ReplicaRecord]) -> dict[str, str]:
    """Per node, a digest of the shards it is to run (replica, rank and the replica's incarnation): changes when a
    shard is placed on it, leaves it for any reason (stopped, failed, moved), or is to sleep or wake. Pure; one pass
    over the replicas."""
    held: dict[str, list[str]] = {}
    for r in replicas:
        if r.failed or r.stop is not None:
            continue
        for a in r.assignments:
            # the sleep level too: a wake is a request waiting (reconcile/sleeping.py)
            held.setdefault(a.node_id, []).append(f"{r.id}/{a.rank}/{a.serve_port}/{a.address}/{r.sleep_level}")
    return {n: hashlib.blake2b("\n".join(sorted(v)).encode(), digest_size=12).hexdigest() for n, v in held.items()}


class Watch:
    """Digests per node, derived once per generation of the replicas, and the nodes waiting for theirs to change.
    One waiter per node: a node's newer wait ends its older one (it cannot hold connections by waiting twice)."""

    def __init__(self) -> None:
        self._generation = -1
        self._digests: dict[str, str] = {}
        self._waiting: dict[str, asyncio.Future[bool]] = {}
        self.closed = False  # the control plane is stopping: no one waits any more

    def digest(self, node_id: str, generation: int, replicas: Iterable[ReplicaRecord]) -> str:
        if generation != self._generation:
            self._digests, self._generation = shard_digests(replicas), generation
        return self._digests.get(node_id, EMPTY)

    def changed(self) -> None:
        """The replicas changed: every waiter looks again."""
        waiting, self._waiting = self._waiting, {}
        for f in waiting.values():
            if not f.done():
                f.set_result(True)

    def close(self) -> None:
        self.closed = True
        self.changed()

    async def wait(self, node_id: str, timeout: float) -> bool:
        """Until the replicas change or `timeout` passes (True), or this node waits again (False: the older wait is
        over, and its request is to be answered at once, not wait again and end the newer one in turn)."""
        if self.closed:
            return True
        old = self._waiting.pop(node_id, None)
        if old is not None and not old.done():
            old.set_result(False)
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[node_id] = fut
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            return True
        finally:
            if self._waiting.get(node_id) is fut:
                del self._waiting[node_id]

    def waiting(self) -> int:
        return len(self._waiting)
