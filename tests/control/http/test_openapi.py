"""/api/explain/MODEL answers a structure, described in the management API's OpenAPI schema; the schema served is
the one in docs/, and every reference in it resolves."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from llmgw.api.router import ModelExplanation, Wanted
from llmgw.core.reasons import Reason
from llmgw.dev.cluster import admin_get
from tests.harness import InProcessServer, await_until, plan

DOC = Path(__file__).resolve().parents[3] / "docs" / "management-api.openapi.json"
BIG = {"name": "big", "source": "org/big", "engine": "sim", "profile": {"gpus_per_shard": 8, "nodes": 2},
       "scaling": {"min": 1, "max": 1}}


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


async def test_explain_is_structured_and_described(tmp_path: Path) -> None:
    p = plan(tmp_path, [], [BIG], reconcile_interval="0.1s")
    async with InProcessServer(p):
        schema = await asyncio.to_thread(admin_get, p, "/api/openapi.json")
        assert schema == json.loads(DOC.read_text()), "docs/management-api.openapi.json is stale: regenerate it"
        names = set(schema["components"]["schemas"])
        assert all(r.removeprefix("#/components/schemas/") in names for r in refs(schema))
        ok = schema["paths"]["/api/explain/{model}"]["get"]["responses"]["200"]
        assert ok["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ModelExplanation"}

        async def explained() -> dict[str, Any] | None:
            e: dict[str, Any] = await asyncio.to_thread(admin_get, p, "/api/explain/big")
            reps = e.get("replicas") or []
            return e if reps and reps[0]["placement"] else None

        raw = await await_until(explained, 15, "a placement decision for big", interval=0.1)
        e = ModelExplanation.model_validate(raw)  # what was sent is what the schema names
        assert e.wanted == Wanted.Replicas and e.replicas[0].phase == "pending"
        placement = e.replicas[0].placement
        assert placement is not None and not placement.placed and placement.nodes_needed == 2
        scheduled = next(c for c in e.replicas[0].conditions if c.type == "Scheduled")
        assert scheduled.reason == Reason.Unschedulable
        unknown = await asyncio.to_thread(admin_get, p, "/api/explain/nope")
        assert unknown == {"model": "nope", "wanted": "unknown", "min": 0, "max": 0, "on_demand": False,
                           "priority": 0, "pinned": False, "replicas": [], "weights": None}
