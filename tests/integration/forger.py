"""A hostile node for tests: a real node certificate, real mutual TLS, and heartbeats that say whatever it likes."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from llmgw.dev.cluster import ClusterPlan
from llmgw.pki.tls import client_context
from tests.clusters import node


class HostileNode:
    def __init__(self, p: ClusterPlan, node_id: str, address: str, port_range: tuple[int, int]) -> None:
        self.p = p
        self.node_id = node_id
        pki = p.workdir / "pki"
        self.ssl = client_context(pki / f"{node_id}.crt", pki / f"{node_id}.key", pki / "ca.crt")
        self.report = node(node_id, engines=("sim",), address=address).report.model_dump(mode="json")
        self.report["port_low"], self.report["port_high"] = port_range

    async def heartbeat(self, shards: list[dict[str, Any]] | None = None, **overrides: Any) -> tuple[int, Any]:
        body = {**self.report, "shards": shards or [], **overrides}
        url = f"https://127.0.0.1:{self.p.agent_port}/v1/agent/heartbeat"
        async with (
            aiohttp.ClientSession() as s,
            s.post(url, data=json.dumps(body), ssl=self.ssl, headers={"Content-Type": "application/json"}) as r,
        ):
            text = await r.text()
            return r.status, (json.loads(text) if r.content_type == "application/json" else text)
