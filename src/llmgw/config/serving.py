"""A model's serving options beyond its engine: priority, sleep, LoRA adapters and sidecars (docs/serving.md).

Each block is validated here with words an operator can act on; reconcile, the router and the agents read them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from llmgw.config.engines import ADAPTER_REQUESTS, MAX_ADAPTERS
from llmgw.config.types import ByteSize, Duration

NAME = r"^[A-Za-z0-9][A-Za-z0-9._:-]*(/[A-Za-z0-9._:-]+)*$"  # a model's name, also an adapter's


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SleepConfig(Strict):
    """An idle replica whose engine can sleep sleeps instead of stopping (owned by the sleep work: may grow)."""

    level: Literal[1, 2] = 1
    # a sleeping replica stops for good after this long unused (None: only for room)
    stop_after: Duration | None = None


class SidecarConfig(Strict):
    """A process started before the model's engine on each of its nodes (owned by the sidecars work: may grow)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    command: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(min_length=1, max_length=256)]
    env: dict[str, str] = {}


class AdapterConfig(Strict):
    """A LoRA adapter of the model, served as a model of its own (docs/serving.md, "LoRA adapters").

    `source` is had like a model's weights: a path on the nodes, or an http(s) URL fetched once per fabric (with
    its sha256, and its size to check the disk first); vLLM also takes an id it resolves itself."""

    name: str = Field(min_length=1, max_length=128, pattern=NAME)
    source: str = Field(min_length=1, max_length=2048)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    size: ByteSize | None = None
    scale: float = Field(default=1.0, gt=0, le=100)  # how strongly it applies, where the engine takes a scale

    @model_validator(mode="after")
    def _fetchable(self) -> AdapterConfig:
        low = self.source[:8].lower()
        if low.startswith("http://") and not self.sha256:
            raise ValueError(f"adapter {self.name}: a plain http:// source needs sha256; or use https://")
        if low.startswith("hf://"):
            raise ValueError(f"adapter {self.name}: hub sources (hf://) are not taken for adapters yet: give a URL "
                             "of its file or a path on the nodes")
        return self


class HasAdapters(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def adapters(self) -> list[AdapterConfig]: ...


def adapters_checked(model: HasAdapters) -> None:
    """Raises with an operator's words where the model's engine cannot serve its adapters as configured."""
    if not model.adapters:
        return
    if model.engine not in ADAPTER_REQUESTS:
        raise ValueError(f"model {model.name}: engine {model.engine} does not serve LoRA adapters "
                         f"(those that do: {', '.join(sorted(ADAPTER_REQUESTS))})")
    if len(model.adapters) > MAX_ADAPTERS:
        raise ValueError(f"model {model.name}: {len(model.adapters)} adapters; each replica loads every adapter of "
                         f"its model at start, at most {MAX_ADAPTERS}")


def names_checked(models: Iterable[HasAdapters]) -> None:
    """Models and adapters share one namespace (what clients send as "model"): raises on a name given twice."""
    owner: dict[str, str] = {}
    for m in models:
        for name, what in ((m.name, "model"), *((a.name, f"adapter of {m.name}") for a in m.adapters)):
            if name in owner:
                raise ValueError(f"models: the name {name!r} is given twice ({owner[name]}, and {what}): models and "
                                 "adapters are named in one namespace")
            owner[name] = what
