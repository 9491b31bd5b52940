"""Requests for a LoRA adapter: routed to the ready replicas of its model (each loads every adapter of its model at
start), the body rewritten as that model's engine names an adapter (config/engines.py ADAPTER_REQUESTS), the answer
naming the adapter, and the usage recorded under it.

llama-server takes the adapters in a body's "lora" field, by their index at launch; a body without the field gets
the adapters as the request before it on the slot left them (seen on the build checked: its prompt cache kept), and
a client could apply an adapter its key is not allowed by naming its index. So every request to a model with
adapters on such an engine gets the field from the router: the adapter asked for at its scale, the others at 0.
"""

from __future__ import annotations

import json
from typing import Any

from llmgw.config.adapters import Served, served_adapters
from llmgw.config.engines import ADAPTER_REQUESTS
from llmgw.config.server import ModelSpec

LORA_FIELD = "lora_field"


class AdapterIndex:
    """The catalog's adapters by name, rebuilt when the catalog or the routing generation changes: a request for
    a model costs nothing more; one for an adapter, a dict lookup."""

    def __init__(self) -> None:
        self._seen: tuple[int, int, int] | None = None
        self._served: dict[str, Served] = {}

    def find(self, name: str, models: dict[str, ModelSpec], generation: int) -> Served | None:
        seen = (generation, id(models), len(models))
        if seen != self._seen:
            self._seen, self._served = seen, served_adapters(models.values())
        served = self._served.get(name)
        if served is not None and models.get(served.base.name) is not served.base:  # the catalog changed in place
            self._served = served_adapters(models.values())
            served = self._served.get(name)
        return served

    def listed(self, models: dict[str, ModelSpec], generation: int) -> list[Served]:
        self.find("", models, generation)
        return list(self._served.values())


def rewritten(payload: dict[str, Any], body: bytes, spec: ModelSpec, served: Served | None) -> bytes:
    """The body to send for a request to `spec` (the adapter `served` of it, or the model itself)."""
    if not spec.adapters or ADAPTER_REQUESTS.get(spec.engine) != LORA_FIELD:
        return body  # an engine that takes the adapter's name as the model: sent as it is
    chosen = served.index if served is not None else -1
    payload["lora"] = [{"id": i, "scale": a.scale if i == chosen else 0.0} for i, a in enumerate(spec.adapters)]
    return json.dumps(payload).encode()


def renamed(spec: ModelSpec, served: Served | None) -> tuple[bytes, bytes] | None:
    """(the model's name, the adapter's) as the engine's answer has them, where the engine answers with the
    model's name (llama-server names its --alias); None where the answer needs nothing."""
    if served is None or ADAPTER_REQUESTS.get(spec.engine) != LORA_FIELD:
        return None
    return b'"model":' + json.dumps(spec.name).encode(), b'"model":' + json.dumps(served.adapter.name).encode()
