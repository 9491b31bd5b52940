"""A key's update and its revocation racing (Credentials.update_key, revoke_keys): an in-process control plane over
SQLite in tmp_path, the store's reads and writes on their threads as in a server."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.core.limits import KeyLimits
from tests.harness import plane_in


async def test_an_update_racing_a_revocation_never_writes_the_key_back_alive(tmp_path: Path) -> None:
    """Without one lock over read and write, an update reads the key, the revocation lands, and the update writes
    its copy (not revoked) over it: a revoked key works again."""
    p = plane_in(tmp_path)
    keys = [(await p.credentials.create_key(f"k{i}", []))[1] for i in range(40)]
    for k in keys:  # the revocation asked first, the update while it is under way
        revoke = asyncio.create_task(p.credentials.revoke_keys(lambda r, k=k: r.id == k.id))  # type: ignore[misc]
        await asyncio.sleep(0)  # the revocation has begun (its read is on its thread): yield, not a wait for time
        await asyncio.gather(revoke, p.credentials.update_key(k.id, {"limits": KeyLimits(rpm=5)}))
    alive = [k.name for k in p.store.list_keys() if k.revoked_at is None]
    assert alive == [], f"revoked keys written back alive by an update: {alive}"
