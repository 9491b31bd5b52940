"""A node's second watch ends its first (two would wake each other in a loop, as an agent restarting mid-watch
makes them), and a revoked node's watch is let go at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.control.nodes.watch import EMPTY
from tests.control.nodes.test_watch import agent_door, as_node, watch
from tests.harness import await_until


async def test_a_nodes_second_watch_answers_its_first_and_is_held_itself(tmp_path: Path) -> None:
    async with agent_door(tmp_path) as (plane, url, pki):
        tls = as_node(pki, "node01")
        first = asyncio.create_task(watch(url, tls, EMPTY))
        await await_until(lambda: plane.registry.watch.waiting() == 1, 10, "node01's first watch held")
        second = asyncio.create_task(watch(url, tls, EMPTY))
        # before the fix the two handlers ended each other's waits in turn, at full CPU, for the whole hold, and
        # the first was never answered
        status, body = await asyncio.wait_for(first, 5)
        assert status == 200 and body["digest"] == EMPTY
        await await_until(lambda: plane.registry.watch.waiting() == 1, 10, "node01's second watch held")
        assert not second.done()
        plane.registry.watch.close()
        await asyncio.gather(second, return_exceptions=True)


async def test_a_node_revoked_while_it_watches_is_let_go_at_once(tmp_path: Path) -> None:
    """agent_api.watch checks `refusal` after each wake ("revoked while it waited"), but plane.revoke() wakes no one:
    a revoked node (no replicas on it, or a revoked serial) keeps its held request for the whole 25 s hold."""
    async with agent_door(tmp_path) as (plane, url, pki):
        held = asyncio.create_task(watch(url, as_node(pki, "node02"), EMPTY))
        await await_until(lambda: plane.registry.watch.waiting() == 1, 10, "node02 watching")
        await plane.revoke("node02", "", "stolen")
        done, _ = await asyncio.wait({held}, timeout=3)
        plane.registry.watch.close()
        await asyncio.gather(held, return_exceptions=True)
        assert done, "the revoked node's watch was still held 3 s after its revocation"
