"""Wire version 12: what a shard runs beside its engine (sidecars) and inside it (LoRA adapters), and sleep.

A sidecar is a process the engine depends on (an exporter, a proxy, a tokenizer service): started before the
engine, which starts only once every sidecar is ready, and stopped after it. An adapter is a LoRA fine-tune of the
shard's model, served under its own name by the same engine. `ShardSpec.sleep` asks a shard's engine to sleep
(level 1: weights to host memory; 2: dropped) and frees its GPUs; 0 wakes it.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from llmgw.core.strict import Strict
from llmgw.wire.weights_plan import WeightsPlan

SERVING_WIRE_VERSION = 12  # the first agents that sleep, run sidecars and serve adapters


RESERVED_ENV = "LLMGW_"  # environment names the agent sets for sidecars and engines: never a sidecar's own
SIDECAR_PORT_ENV = "LLMGW_SIDECAR_PORT"  # a sidecar's own port, also {port} in its argv
SIDECAR_KEY_FILE_ENV = "LLMGW_SIDECAR_KEY_FILE"  # where a sidecar with `secret` reads the replica's secret


class SidecarSpec(Strict):
    """One process the node starts before the shard's engine: the engine starts once every sidecar is ready, and
    stops before them (config/serving.py SidecarConfig says what each field means)."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    argv: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(min_length=1, max_length=256)]
    env: Annotated[dict[Annotated[str, Field(max_length=128)], Annotated[str, Field(max_length=4096)]],
                   Field(max_length=256)] = {}
    port: bool = False
    ready: Literal["", "tcp", "http"] = ""  # "": ready once started
    ready_path: Annotated[str, Field(max_length=512)] = ""
    ready_timeout: Annotated[float, Field(ge=0, le=3600)] = 0.0
    secret: bool = False


def port_env(name: str) -> str:
    """The variable through which the engine learns a sidecar's port: LLMGW_SIDECAR_<NAME>_PORT."""
    return f"LLMGW_SIDECAR_{re.sub(r'[^A-Za-z0-9]', '_', name).upper()}_PORT"


class AdapterSpec(Strict):
    """A LoRA adapter the shard's engine loads at start and serves under `name`: its file had like weights (a path
    on the node, or a URL fetched by the plan, once per fabric), in the order the router names them by."""

    name: Annotated[str, Field(min_length=1, max_length=128)]
    source: Annotated[str, Field(min_length=1, max_length=2048)]
    weights: WeightsPlan | None = None  # for a source fetched over http(s)
