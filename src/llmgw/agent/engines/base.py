"""The engine interface: argv and env for a shard, which rank serves HTTP, how health is probed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from llmgw.wire.messages import ShardSpec


@dataclass(frozen=True)
class LaunchContext:
    """What the node knows that the control plane does not: paths and its own address."""

    binary: str  # the engine's executable (for sim: the Python interpreter)
    model_path: str  # the source resolved on this node
    host: str  # address to bind
    threads: int = 1
    key_file: str = ""  # where a secret file for this shard may be written (0600), for engines that read one


# The environment variable through which sim (and the SGLang shim) receive the replica's secret. An environment is
# readable only by the process's owner; a command line is readable by every user of the machine.
KEY_ENV = "LLMGW_ENGINE_KEY"


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    serves_http: bool = False
    health_path: str = "/health"
    # where the engine lists what it serves: healthy and listing no model is not ready ("" skips the check)
    models_path: str = "/v1/models"
    # files the supervisor writes (mode 0600) before starting the process and removes after it stops: secrets
    files: dict[str, str] = field(default_factory=dict)


class EngineAdapter(Protocol):
    name: str

    def launch(self, spec: ShardSpec, ctx: LaunchContext) -> Launch:
        """Pure: the command for one shard. No I/O."""
        ...

    def flags(self) -> list[str]:
        """Every flag the widest command (multi-node) would use, for engine-check against --help."""
        ...


def nccl_env(spec: ShardSpec) -> dict[str, str]:
    env = {}
    if spec.fabric_adapters:
        env["NCCL_IB_HCA"] = ",".join(spec.fabric_adapters)
    if spec.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
    return env
