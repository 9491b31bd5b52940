"""Which replicas serve which LoRA adapters, as ctl, the dashboard and /metrics show it: every ready replica of a
model serves all of its adapters (each loaded when the engine started)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from pydantic import BaseModel

from llmgw.config.server import ModelSpec
from llmgw.records.state import Phase


class AdapterLine(BaseModel):
    adapter: str
    model: str  # the model it adapts, whose replicas serve it
    replicas: list[str] = []  # the ready ones


class Replica(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def state(self) -> Phase: ...


def adapter_lines(models: Mapping[str, ModelSpec], replicas: Iterable[Replica]) -> list[AdapterLine]:
    ready: dict[str, list[str]] = {}
    for r in replicas:
        if r.state == Phase.Ready and models.get(r.model) is not None and models[r.model].adapters:
            ready.setdefault(r.model, []).append(r.id)
    return [AdapterLine(adapter=a.name, model=m.name, replicas=ready.get(m.name, []))
            for m in models.values() for a in m.adapters]


def adapter_rows(lines: list[AdapterLine]) -> list[tuple[str, str, str]]:
    """(adapter, model, replicas) as text, for a table."""
    return [(x.adapter, x.model, ", ".join(x.replicas) or "none ready") for x in lines]
