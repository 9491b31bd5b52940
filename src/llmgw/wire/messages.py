"""The agent's whole observed state (NodeReport) and the node's whole desired state (DesiredState).

Repeating a message is harmless: both sides are level-triggered.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

WIRE_VERSION = 1


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GPU(Strict):
    index: int = Field(ge=0)
    uuid: str = ""
    name: str
    gpu_class: str  # e.g. "H100-80G"
    memory_mib: int = Field(ge=0)
    faulty: bool = False
    fault: str = ""  # the machine's own words: "Xid 79: GPU has fallen off the bus"
    # indices this card has NVLink to; None = topology unknown (no NVML), [] = known to have none
    nvlink_peers: list[int] | None = None


class IBPort(Strict):
    port: int
    state: str  # ACTIVE, INIT, DOWN, ...
    rate_gbps: float = 0.0


class IBAdapter(Strict):
    name: str
    ports: list[IBPort] = []


class Fabric(Strict):
    """A fabric the node advertises: every adapter named is present with an ACTIVE port."""

    name: str
    adapters: list[str]
    rate_gbps: float  # slowest active link: a collective runs at its slowest


class CPU(Strict):
    model: str = ""
    cores: int = 0
    avx2: bool = False
    avx512f: bool = False
    amx: bool = False


class Disk(Strict):
    path: str
    total_bytes: int
    free_bytes: int


class Hardware(Strict):
    arch: str = ""
    os: str = ""
    cpu: CPU = CPU()
    mem_total_bytes: int = 0
    mem_available_bytes: int = 0
    disk: Disk | None = None
    gpu_source: Literal["nvml", "nvidia-smi", "inventory", "none"] = "none"
    nvidia_driver: str = ""
    gpus: list[GPU] = []
    gpu_problems: list[str] = []  # discovery trouble that is not absence, e.g. an NVML/driver mismatch
    ib_adapters: list[IBAdapter] = []


class EngineStatus(Strict):
    name: str  # llamacpp, vllm, sglang, sim
    version: str = ""
    path: str = ""
    runs: bool
    message: str = ""  # why it cannot run, in the machine's words


class ShardState(Strict):
    replica_id: str
    rank: int
    state: Literal["pending", "starting", "running", "ready", "exited", "failed"]
    message: str = ""
    pid: int | None = None
    endpoint: str = ""  # "http://host:port" for the rank that serves HTTP
    exit_code: int | None = None
    restarts: int = 0


class NodeReport(Strict):
    version: int = WIRE_VERSION
    node_id: str = Field(min_length=1)
    address: str = Field(min_length=1)
    agent_version: str = ""
    hardware: Hardware
    engines_probed: bool = False  # False: "never probed", which is not "has none"
    engines: list[EngineStatus] = []
    install_progress: list[str] = []
    fabrics: list[Fabric] = []
    fabric_problems: list[str] = []
    weights: list[str] = []  # sources this node can see on disk
    port_low: int = 20000  # engines on this node may be given ports in [port_low, port_high]
    port_high: int = 20999
    shards: list[ShardState] = []
    warnings: list[str] = []


class ShardSpec(Strict):
    replica_id: str
    model: str
    engine: str
    source: str
    rank: int
    world_size: int
    gpus: list[int] = []
    args: list[str] = []
    env: dict[str, str] = {}
    serve_port: int | None = None  # only the rank that serves HTTP has one
    leader_address: str = ""
    peer_addresses: list[str] = []  # every rank's node address, by rank
    rendezvous_port: int | None = None
    fabric_adapters: list[str] = []  # NCCL_IB_HCA for this node


class DesiredState(Strict):
    version: int = WIRE_VERSION
    node_id: str
    shards: list[ShardSpec] = []
    engines: list[str] = []
    heartbeat_interval: float = 3.0
