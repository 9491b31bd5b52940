"""A model's serving options beyond its engine: priority, sleep, LoRA adapters and sidecars (docs/serving.md).

Each block is validated here with words an operator can act on; reconcile, the router and the agents read them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Literal, Protocol

from pydantic import AfterValidator, Field, field_validator, model_validator

from llmgw.config.engines import ADAPTER_REQUESTS, MAX_ADAPTERS, SLEEPS
from llmgw.config.types import ByteSize, Duration, within
from llmgw.core.strict import Strict
from llmgw.wire.serving import RESERVED_ENV, SidecarSpec, port_env

NAME = r"^[A-Za-z0-9][A-Za-z0-9._:-]*(/[A-Za-z0-9._:-]+)*$"  # a model's name, also an adapter's


class SleepConfig(Strict):
    """An idle replica whose engine can sleep sleeps instead of stopping (owned by the sleep work: may grow)."""

    level: Literal[1, 2] = 1
    # a sleeping replica stops for good after this long unused (None: only for room)
    stop_after: Duration | None = None
    # the host memory a replica asleep at level 1 holds (its weights): a node takes sleepers only up to its share
    # for them (server.yaml eviction.sleep_host_share); level 2 holds none. Unset: the model's weights size where
    # the catalog knows it (a URL source's size), else unknown, and a sleeper of unknown size is counted as the
    # node's whole share: it sleeps there alone. 0 was "no cap" before: any number could pin a node's RAM
    host_memory: ByteSize | None = None
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


class ReadyCheck(Strict):
    """How the agent knows a sidecar is ready: an HTTP path on its port answered 2xx, or its port accepting a
    connection; it has `timeout` from its start to get there, or its shard fails (SidecarFailed)."""

    http: str | None = Field(default=None, min_length=1, max_length=512, pattern=r"^/[\x21-\x7e]*$")
    tcp: bool = False
    timeout: Annotated[Duration, within(0.1, 3600)] = 60.0

    @model_validator(mode="after")
    def _one_way(self) -> ReadyCheck:
        if (self.http is not None) == self.tcp:
            raise ValueError("give one of http (a path, e.g. /health) or tcp: true")
        return self


class SidecarConfig(Strict):
    """A process started before the model's engine on each of its nodes (docs/serving.md, Sidecars)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    command: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(min_length=1, max_length=256)]
    env: Annotated[dict[Annotated[str, Field(max_length=128)], Annotated[str, Field(max_length=4096)]],
                   Field(max_length=256)] = {}
    # a loopback port the agent picks at each start: {port} in the command, and the engine is told it
    port: bool = False
    ready: ReadyCheck | None = None  # None: ready once started
    # the replica's engine secret in a file only the agent's user can read (its path in SIDECAR_KEY_FILE_ENV)
    secret: bool = False

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise ValueError(f"{k!r} is not an environment variable name (letters, digits and _)")
            if k.upper().startswith(RESERVED_ENV):
                raise ValueError(f"{k!r}: names starting {RESERVED_ENV} are the agent's to set")
        return v

    @model_validator(mode="after")
    def _port_for_placeholders(self) -> SidecarConfig:
        if any("\0" in a for a in [*self.command, *self.env.values()]):
            raise ValueError("a NUL character cannot be passed to a process (in its command or env)")
        if not self.port and any("{port}" in a for a in self.command):
            raise ValueError("the command names {port}: set port: true")
        if not self.port and self.ready is not None:
            raise ValueError("a readiness check probes the sidecar's port: set port: true")
        return self

    def spec(self) -> SidecarSpec:
        ready = self.ready
        return SidecarSpec(name=self.name, argv=self.command, env=self.env, port=self.port, secret=self.secret,
                           ready="" if ready is None else "tcp" if ready.tcp else "http",
                           ready_path=(ready.http or "") if ready else "",
                           ready_timeout=ready.timeout if ready else 0.0)


def _unique_names(v: list[SidecarConfig]) -> list[SidecarConfig]:
    seen: dict[str, str] = {}
    for c in v:
        if c.name in seen.values():
            raise ValueError(f"duplicate sidecar name {c.name!r}")
        if port_env(c.name) in seen:  # the engine could not tell their ports apart
            raise ValueError(f"sidecar names {seen[port_env(c.name)]!r} and {c.name!r} give one variable, "
                             f"{port_env(c.name)}: rename one")
        seen[port_env(c.name)] = c.name
    return v


Sidecars = Annotated[list[SidecarConfig], Field(max_length=16), AfterValidator(_unique_names)]


def sidecar_ports_named(args: list[str], sidecars: list[SidecarConfig]) -> None:
    """Every {sidecars.NAME.port} in the engine's arguments names a sidecar of the model that has a port."""
    ported = {c.name for c in sidecars if c.port}
    for name in re.findall(r"\{sidecars\.([^{}]*)\.port\}", " ".join(args)):
        if name not in ported:
            raise ValueError(f"profile.args names {{sidecars.{name}.port}}: the model has no sidecar {name!r} "
                             f"with port: true")


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
