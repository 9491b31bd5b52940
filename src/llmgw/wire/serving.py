"""Wire version 12: what a shard runs beside its engine (sidecars) and inside it (LoRA adapters), and sleep.

A sidecar is a process the engine depends on (an exporter, a proxy, a tokenizer service): started before the
engine, which starts only once every sidecar is ready, and stopped after it. An adapter is a LoRA fine-tune of the
shard's model, served under its own name by the same engine. `ShardSpec.sleep` asks a shard's engine to sleep
(level 1: weights to host memory; 2: dropped) and frees its GPUs; 0 wakes it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from llmgw.wire.weights_plan import WeightsPlan

SERVING_WIRE_VERSION = 12  # the first agents that sleep, run sidecars and serve adapters


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SidecarSpec(Strict):
    """One process the node starts before the shard's engine (owned by the sidecars work: fields may grow)."""

    name: Annotated[str, Field(min_length=1, max_length=64)]
    argv: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(min_length=1, max_length=256)]
    env: dict[str, str] = {}


class AdapterSpec(Strict):
    """A LoRA adapter the shard's engine loads at start and serves under `name`: its file had like weights (a path
    on the node, or a URL fetched by the plan, once per fabric), in the order the router names them by."""

    name: Annotated[str, Field(min_length=1, max_length=128)]
    source: Annotated[str, Field(min_length=1, max_length=2048)]
    weights: WeightsPlan | None = None  # for a source fetched over http(s)
