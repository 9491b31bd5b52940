"""Requests for a LoRA adapter: routed to the ready replicas of its model (each loads every adapter of its model at
start), the body rewritten as that model's engine names an adapter (config/engines.py ADAPTER_REQUESTS), the answer
naming the adapter, and the usage recorded under it.

llama-server takes the adapters in a body's "lora" field, by their index at launch; a body without the field gets
the adapters as the request before it on the slot left them (seen on the build checked: its prompt cache kept), and
a client could apply an adapter its key is not allowed by naming its index. So every request to a model with
adapters on such an engine gets the field from the router: the adapter asked for at its scale (the others are then
0), or the first at 0 for the model itself.
"""

from __future__ import annotations

import json
from typing import Any

from llmgw.config.adapters import ServedAdapter, served_adapters
from llmgw.config.engines import ADAPTER_REQUESTS
from llmgw.config.server import ModelSpec

LORA_FIELD = "lora_field"
# where llama-server reads a body's "lora" (checked on its build: its Messages path leaves it out and runs with every
# adapter at its launch scale, whatever the body says): on the others a model with adapters is not served
LORA_FIELD_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})


class AdapterIndex:
    """The catalog's adapters by name, rebuilt when the catalog or the routing generation changes: a request for
    a model costs nothing more; one for an adapter, a dict lookup."""

    def __init__(self) -> None:
        self._seen: tuple[int, int, int] | None = None
        self._served: dict[str, ServedAdapter] = {}

    def find(self, name: str, models: dict[str, ModelSpec], generation: int) -> ServedAdapter | None:
        seen = (generation, id(models), len(models))
        if seen != self._seen:
            self._seen, self._served = seen, served_adapters(models.values())
        served = self._served.get(name)
        if served is not None and models.get(served.base.name) is not served.base:  # the catalog changed in place
            self._served = served_adapters(models.values())
            served = self._served.get(name)
        return served

    def listed(self, models: dict[str, ModelSpec], generation: int) -> list[ServedAdapter]:
        self.find("", models, generation)
        return list(self._served.values())


def lora_unread(spec: ModelSpec, path: str) -> bool:
    """Whether `spec`'s engine would answer on `path` with adapters other than the one asked for (or none)."""
    return bool(spec.adapters) and ADAPTER_REQUESTS.get(spec.engine) == LORA_FIELD and path not in LORA_FIELD_PATHS


def rewritten(payload: dict[str, Any], body: bytes, spec: ModelSpec, served: ServedAdapter | None) -> bytes:
    """The body to send for a request to `spec` (the adapter `served` of it, or the model itself)."""
    if not spec.adapters or ADAPTER_REQUESTS.get(spec.engine) != LORA_FIELD:
        return body  # an engine that takes the adapter's name as the model: sent as it is
    # llama-server sets every adapter a non-empty list leaves out to 0 (an empty one means each at its default)
    lora = [{"id": served.index, "scale": served.adapter.scale} if served is not None else {"id": 0, "scale": 0.0}]
    theirs = "lora" in payload
    payload["lora"] = lora  # for a stage that writes the body again from it
    if theirs:  # the client's own is replaced, whatever its bytes were
        return json.dumps(payload).encode()
    at = body.index(b"{") + 1  # a JSON object with a "model" at least: put first, without writing the rest again
    return body[:at] + b'"lora":' + json.dumps(lora, separators=(",", ":")).encode() + b"," + body[at:]


def renamed(spec: ModelSpec, served: ServedAdapter | None) -> tuple[bytes, bytes] | None:
    """(the model's name, the adapter's) as the engine's answer has them, where the engine answers with the
    model's name (llama-server names its --alias); None where the answer needs nothing."""
    if served is None or ADAPTER_REQUESTS.get(spec.engine) != LORA_FIELD:
        return None
    return b'"model":' + json.dumps(spec.name).encode(), b'"model":' + json.dumps(served.adapter.name).encode()


class StreamRename:
    """`renamed`'s replacement over a stream: a read may end inside the name (a network splits an event where it
    likes), so a tail that could begin it is held for the next read."""

    def __init__(self, old: bytes, new: bytes) -> None:
        self.old, self.new, self.held = old, new, b""

    def feed(self, chunk: bytes) -> bytes:
        data, self.held = self.held + chunk, b""
        last = data.rfind(self.old)
        after = last + len(self.old) if last >= 0 else 0  # a tail held never overlaps a whole name before it
        for k in range(min(len(self.old) - 1, len(data) - after), 0, -1):
            if data.endswith(self.old[:k]):
                data, self.held = data[:-k], data[-k:]
                break
        return data.replace(self.old, self.new)

    def rest(self) -> bytes:
        """What is still held when the stream ends: as it came."""
        held, self.held = self.held, b""
        return held
