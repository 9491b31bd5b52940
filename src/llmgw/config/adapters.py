"""The catalog's adapters by the name clients send: which model each belongs to, and its place among that model's
(llama-server knows an adapter by its index in the order given at launch)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from llmgw.config.server import ModelSpec
from llmgw.config.serving import AdapterConfig
from llmgw.wire.messages import ShardState


@dataclass(frozen=True, slots=True)
class ServedAdapter:
    base: ModelSpec
    adapter: AdapterConfig
    index: int


def served_adapters(models: Iterable[ModelSpec]) -> dict[str, ServedAdapter]:
    return {a.name: ServedAdapter(m, a, i) for m in models for i, a in enumerate(m.adapters)}


def catalog_names(models: Iterable[ModelSpec]) -> set[str]:
    """Every name a key may be allowed: the models' and their adapters'."""
    return {n for m in models for n in (m.name, *(a.name for a in m.adapters))}


def loaded_as_named(spec: ModelSpec | None, leader: ShardState | None) -> bool:
    """Whether a replica's engine loaded the adapters its model has now, in that order (none: none), as its leading
    shard reports: an engine started before the catalog changed knows them by other indices, or lacks one."""
    names = [a.name for a in spec.adapters] if spec is not None else []
    return (leader.adapters if leader is not None else []) == names
