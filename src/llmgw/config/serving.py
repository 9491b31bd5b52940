"""A model's serving options beyond its engine: priority, sleep, LoRA adapters and sidecars (docs/serving.md).

Each block is validated here with words an operator can act on; reconcile, the router and the agents read them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmgw.config.engines import SLEEPS
from llmgw.config.types import ByteSize, Duration

NAME = r"^[A-Za-z0-9][A-Za-z0-9._:-]*(/[A-Za-z0-9._:-]+)*$"  # a model's name, also an adapter's


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SleepConfig(Strict):
    """An idle replica whose engine can sleep sleeps instead of stopping (owned by the sleep work: may grow)."""

    level: Literal[1, 2] = 1
    # a sleeping replica stops for good after this long unused (None: only for room)
    stop_after: Duration | None = None
    # the host memory a replica asleep at level 1 holds (its weights): a node takes sleepers only up to its share
    # for them (server.yaml eviction.sleep_host_share); level 2 holds none
    host_memory: ByteSize = 0
    # a replica ready (or woken) for less than this is not put to sleep, so sleep and wake do not take turns
    min_stay: Duration = 60.0


def sleep_refused(engine: str, on_demand: bool, nodes: int) -> None:
    """A sleep block where it could never apply is refused, in words that say why (ValueError)."""
    if engine not in SLEEPS:
        raise ValueError(f"sleep: engine {engine} cannot sleep (engines that can: {', '.join(sorted(SLEEPS))})")
    if not on_demand:
        raise ValueError("sleep: only an on-demand model (scaling min 0, max above it) sleeps when idle")
    if nodes != 1:
        raise ValueError("sleep: a replica spanning nodes never sleeps: the model's profile.nodes must be 1")


class SidecarConfig(Strict):
    """A process started before the model's engine on each of its nodes (owned by the sidecars work: may grow)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    command: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(min_length=1, max_length=256)]
    env: dict[str, str] = {}


class AdapterConfig(Strict):
    """A LoRA adapter of the model, served as a model of its own (owned by the adapters work: may grow)."""

    name: str = Field(min_length=1, max_length=128, pattern=NAME)
    source: str = Field(min_length=1, max_length=2048)
