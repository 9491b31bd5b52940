"""A shard's engine held until its sidecars are ready (sidecars.py), the shard saying meanwhile what it waits for."""

from __future__ import annotations

import aiohttp

from llmgw.agent.supervisor.process import ShardProcess
from llmgw.agent.supervisor.sidecars import SidecarWaiting
from llmgw.core.reasons import Reason


async def ready(sp: ShardProcess, now: float, http: aiohttp.ClientSession) -> bool:
    """Whether the shard's engine may start now, every sidecar ready. Else the shard says what it waits for
    ("starting", no engine yet), or fails with the words of a sidecar that never got ready, and stops the rest."""
    assert sp.sidecars is not None
    step = await sp.sidecars.advance(now, http)
    if step is None:
        return True
    sp.proc, sp.exit_code = None, None  # the engine that ran before them, if any, is gone: not its exit again
    if isinstance(step, SidecarWaiting):
        sp.state, sp.message, sp.reason = "starting", step.words, Reason.SidecarsStarting.value
    else:
        sp.state, sp.message, sp.reason = "failed", step.words, Reason.SidecarFailed.value
        await sp.sidecars.stop()
    return False
