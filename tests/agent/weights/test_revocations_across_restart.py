"""A restarted agent still refuses the nodes it was told are revoked."""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp

from llmgw.agent.agent import Agent
from llmgw.core.clock import FakeClock
from llmgw.pki.ca import issue
from tests.agent.test_agent_report import config
from tests.agent.weights.kit import hold
from tests.harness import free_port


async def test_a_restarted_agent_does_not_serve_a_node_it_was_told_is_revoked(tmp_path: Path) -> None:
    """The peer listener starts before the first heartbeat brings the revocation list: after a restart, and while the
    control plane does not answer, a revoked node03 is still refused."""
    cfg = config(tmp_path, "h100x8-ib2", []).model_copy(update={"peer_port": free_port(), "address": "127.0.0.1"})
    pki = Path(cfg.tls.ca).parent
    issue(pki, "node03")
    url = "http://127.0.0.1:9/models/model.gguf"
    hold(Path(cfg.weights_dir), url, os.urandom(100_000))

    before = Agent(cfg, FakeClock())
    before.learn_revoked(["node03"])  # as the last desired state said
    await before.close()

    a = Agent(cfg, FakeClock())
    await a.start()  # the control plane (https://127.0.0.1:1) does not answer
    try:
        from llmgw.pki.tls import client_context
        ctx = client_context(pki / "node03.crt", pki / "node03.key", pki / "ca.crt")
        async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{cfg.peer_port}/v1/weights",
                                                       params={"source": url}, ssl=ctx,
                                                       server_hostname="node07") as r:
            status = r.status
    finally:
        await a.close()
    assert status == 403, f"revoked node03 was answered {status} by the restarted agent"
