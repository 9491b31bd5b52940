"""A watch started while the client's session is closed for a renewed certificate raises UpstreamError, the one
error the agent's watch task survives, not RuntimeError('Session is closed')."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path

from llmgw.agent.agent import Agent
from llmgw.agent.client import ControlPlaneClient
from llmgw.control.nodes.watch import EMPTY
from tests.control.nodes.test_watch import agent_door, as_node
from tests.harness import await_until


async def test_a_watch_during_a_session_close_is_an_upstream_error(tmp_path: Path) -> None:
    async with agent_door(tmp_path) as (_, url, pki):
        base = url.removesuffix("/v1/agent/watch")
        client = ControlPlaneClient([base], lambda: as_node(pki, "node01"), 10.0)
        try:
            assert await client.watch("") == EMPTY  # a kept-alive TLS connection in the pool
            # the heartbeat's _reload_if_renewed closes the session; the watch task runs meanwhile
            session = client._session
            closing = asyncio.create_task(client.close())
            for _ in range(1000):  # until the close has begun (a bounded poll of a condition, no timing)
                if closing.done() or (session is not None and session.closed):
                    break
                await asyncio.sleep(0)
            assert not closing.done(), "the close finished at once: no window on this machine"
            try:
                got: object = await client.watch(EMPTY + "x")
            except Exception as e:
                got = e
            await closing
            assert not isinstance(got, RuntimeError), f"escaped as {got!r}: not an UpstreamError"
        finally:
            await client.close()


async def test_the_agents_watch_survives_an_unexpected_error() -> None:
    calls = []

    class Client:
        async def watch(self, seen: str) -> str:
            calls.append(seen)
            if len(calls) == 1:
                raise RuntimeError("Session is closed")
            if len(calls) == 2:
                return "d1"
            await asyncio.Event().wait()
            return "never"

    fake = types.SimpleNamespace(client=Client(), interval=0.05, wake=asyncio.Event())
    stop = asyncio.Event()
    task = asyncio.create_task(Agent._watch(fake, stop))  # type: ignore[arg-type]
    try:
        await await_until(lambda: fake.wake.is_set() or task.done(), 10, "the watch woke the loop, or ended")
        assert not task.done(), f"the watch task ended for good: {task.exception()!r}"
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
