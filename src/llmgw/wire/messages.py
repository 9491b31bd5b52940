"""The agent's whole observed state (NodeReport) and the node's whole desired state (DesiredState).

Repeating a message is harmless: both sides are level-triggered.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from llmgw.core.strict import Strict
from llmgw.core.units import mb
from llmgw.wire.engines import EngineSource
from llmgw.wire.hub import MAX_FILES, is_hub
from llmgw.wire.serving import AdapterSpec, SidecarSpec
from llmgw.wire.weights_plan import WeightsPeer as WeightsPeer  # re-exported: named from here too
from llmgw.wire.weights_plan import WeightsPlan as WeightsPlan

X86_ARCHES = frozenset({"x86_64", "amd64", "i386", "i686"})  # the kernel's and Python's names: AVX2 is x86's
# 2: problems with codes, a reason on engines and shards; 3: engine sources in the desired state; 4: weights (the
# directories and fetches a node reports, its peer port; how each shard's weights are to be had); 5: each shard's
# engine load (the engine's own gauges under llmgw's names) and engine installs as numbers; 6: how many requests a
# shard's engine generates at once, when it has a fixed number of slots; 7: the peer rank whose loss ended a shard,
# and the shard state "unresponsive" (it served, and its engine no longer answers); 8: a card's MIG instances and the
# CUDA version its driver supports; 9: engine builds by accelerator (a variant's CUDA, C library, runtime companion, a
# release's digest list), the build a node took and those it passed over with their reasons, the node's glibc;
# 10: models named by a hub id (a plan's file list, the hub's base URL and token; a fetch's files done and total);
# 11: renewals (wire/renewal.py): a node whose report has not changed sends a renewal instead, and the desired
# state carries its renewal token and its own etag; 12 (wire/serving.py): a shard may be told to sleep (and reports
# "sleeping"), may have sidecars started before its engine, and may serve LoRA adapters of its model; 13: the
# control plane reads each release's digest list for the fleet, and an engine source carries what it could not
# learn (digests_unknown) and whether it has not read it yet (digests_pending)
WIRE_VERSION = 13
OLDEST_WIRE_VERSION = 1

# Everything a node reports is a claim, and every claim is bounded: a node may not grow the control plane's memory,
# its store or an operator's terminal without limit.
Name = Annotated[str, Field(max_length=128)]
# A renewal token is "lease" on the wire, its name before it was a renewal's: an agent and a control plane of
# different releases still read each other. A model with one reads and writes the wire's name, and takes the code's
# where the code makes it.
LEASE = "lease"
WIRE_NAMES = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)
Text = Annotated[str, Field(max_length=2048)]
Texts = Annotated[list[Text], Field(max_length=64)]
Count = Annotated[int, Field(ge=0, le=2**53)]
Port = Annotated[int, Field(ge=1024, le=65535)]


def _ip_literal(v: str) -> str:
    """A node's address is a plain IP literal, kept in its canonical form: a host name would be resolved later, by
    whoever sends to it, and an IPv6 zone ("%eth0") is text a URL would not keep to itself."""
    try:
        ip = ipaddress.ip_address(v)
    except ValueError:
        raise ValueError(f"{v[:64]!r} is not an IP address") from None
    if "%" in v:
        raise ValueError(f"{v[:64]!r}: an address with a zone is not routable from another host")
    return ip.compressed


Address = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_ip_literal)]


class Problem(Strict):
    """Something a node found wrong with itself: a code (one of llmgw's reasons) and the machine's own words."""

    code: Name
    message: Text
    subject: Name = ""  # what it is about: a fabric, a GPU index, an engine, a probe


Problems = Annotated[list[Problem], Field(max_length=64)]


class MigInstance(Strict):
    """One MIG slice of a card, as the driver describes it."""

    gpu_instance: int = Field(ge=0, le=1023)
    compute_instance: int = Field(default=0, ge=0, le=1023)
    memory_mib: Count
    multiprocessors: Count = 0
    profile: Name = ""  # NVIDIA's name for the slice ("3g.40gb") where the source says it


class GPU(Strict):
    index: int = Field(ge=0, le=1023)
    uuid: Name = ""
    name: Name
    gpu_class: Name  # e.g. "H100-80G"
    memory_mib: Count
    faulty: bool = False
    fault: Text = ""  # the machine's own words: "Xid 79: GPU has fallen off the bus"
    # indices this card has NVLink to; None = topology unknown (no NVML), [] = known to have none
    nvlink_peers: Annotated[list[Annotated[int, Field(ge=0, le=1023)]], Field(max_length=1024)] | None = None
    # MIG mode is on: the card is cut into these instances ([] = none made yet); None = MIG off or not supported
    mig: Annotated[list[MigInstance], Field(max_length=64)] | None = None

    @property
    def offered_whole(self) -> bool:
        """Placement may give this card to a shard: healthy, and not cut into MIG instances."""
        return not self.faulty and self.mig is None


class IBPort(Strict):
    port: int = Field(ge=0, le=255)
    state: Name  # ACTIVE, INIT, DOWN, ...
    rate_gbps: float = Field(default=0.0, ge=0, le=1e6)


class IBAdapter(Strict):
    name: Name
    ports: Annotated[list[IBPort], Field(max_length=64)] = []


class Fabric(Strict):
    """A fabric the node advertises: every adapter named is present with an ACTIVE port."""

    name: Name
    adapters: Annotated[list[Name], Field(max_length=64)]
    rate_gbps: float = Field(ge=0, le=1e6)  # slowest active link: a collective runs at its slowest


class CPU(Strict):
    model: Name = ""
    cores: int = Field(default=0, ge=0, le=1_000_000)
    avx2: bool = False
    avx512f: bool = False
    amx: bool = False


class Disk(Strict):
    path: Text
    total_bytes: Count
    free_bytes: Count


class Hardware(Strict):
    arch: Name = ""
    os: Name = ""
    cpu: CPU = CPU()
    mem_total_bytes: Count = 0
    mem_available_bytes: Count = 0
    disk: Disk | None = None
    gpu_source: Literal["nvml", "nvidia-smi", "inventory", "none"] = "none"
    nvidia_driver: Name = ""
    nvidia_cuda: Name = ""  # the newest CUDA the driver supports ("12.2"), as nvidia-smi or NVML says it
    glibc: Name = ""  # the C library's version ("2.39"): prebuilt engines need a recent one; "" if not glibc or unread
    gpus: Annotated[list[GPU], Field(max_length=1024)] = []
    gpu_problems: Texts = []  # discovery trouble that is not absence, e.g. an NVML/driver mismatch
    ib_adapters: Annotated[list[IBAdapter], Field(max_length=64)] = []

    @property
    def lacks_avx2(self) -> bool:
        """An x86 CPU read without AVX2 (cores == 0: cpuinfo was not read, and unknown is not "lacks")."""
        return self.arch.lower() in X86_ARCHES and self.cpu.cores > 0 and not self.cpu.avx2


class BuildPassedOver(Strict):
    """A better build of an engine that this node did not take, and why: DriverTooOld, LibcTooOld,
    NoBuildForProcessor, or the reason its install failed here."""

    variant: Name
    reason: Name
    message: Text


class EngineStatus(Strict):
    name: Name  # llamacpp, vllm, sglang, sim
    version: Name = ""
    path: Text = ""
    runs: bool
    message: Text = ""  # why it cannot run (or why its check was inconclusive), in the machine's words
    reason: Name = ""  # a code for message: EngineCannotRun, EngineFlagsMissing, EngineCheckInconclusive
    variant: Name = ""  # the build this node took ("cuda12-x86_64"); "" when it chose none (or one named in agent.yaml)
    passed_over: Annotated[list[BuildPassedOver], Field(max_length=16)] = []  # better builds it did not take, and why


class EngineLoad(Strict):
    """An engine's own gauges, read by the agent from the shard's /metrics, under names every engine shares. None:
    the engine does not expose that gauge (not zero)."""

    running: float | None = Field(default=None, ge=0, le=1e9)  # requests being generated now
    waiting: float | None = Field(default=None, ge=0, le=1e9)  # requests queued inside the engine
    kv_cache_usage: float | None = Field(default=None, ge=0, le=1)  # fraction of the KV cache in use
    at: float = Field(default=0.0, ge=0)  # when it was read (the node's clock)


# the agent's gate answers a request it could not hand to the engine with this header: it reached no engine, so the
# router may send it to another replica (agent/gate.py)
UNREACHED_HEADER = "X-Llmgw-Engine-Unreached"


class ShardState(Strict):
    replica_id: Name
    rank: int = Field(ge=0, le=1023)
    state: Literal["pending", "starting", "running", "ready", "unresponsive", "exited", "failed", "sleeping"]
    message: Text = ""
    reason: Name = ""  # a code for message when it says why the shard is not ready: WeightsUnusable, ModelNotLoaded
    pid: int | None = Field(default=None, ge=0, le=2**32)
    # what the node says it serves on; informational only: the router sends to the address and port the control
    # plane assigned, never to one a node names
    endpoint: Text = ""
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31)
    restarts: int = Field(default=0, ge=0, le=2**31)
    load: EngineLoad | None = None  # the engine's gauges at its last scrape; None: not scraped (yet)
    closes_after_stream: bool = False  # its engine drops the connection after a streamed answer (engine knowledge)
    slots: int | None = Field(default=None, ge=1, le=1_000_000)  # requests its engine runs at once; None: not fixed
    # version 7: the rank of the group whose going ended this shard's engine, as the engine said (the control
    # plane names that rank's node); None: not said
    lost_peer: int | None = Field(default=None, ge=0, le=1023)
    # version 12: the LoRA adapters its engine loaded, in their order (the router names one by its index there): a
    # replica whose engine has other than its model's now is not routed (control/nodes/registry.py ready_table)
    adapters: list[Name] = Field(default=[], max_length=64)


class WeightsDir(Strict):
    """A directory the node looks for weights in, and the file system holding it."""

    path: Text
    fs_type: Name = ""  # as the kernel names it (ext4, xfs, nfs4, ...); "" when it could not be read
    network: bool = False  # a file system other nodes may mount too: never cleaned, counted on every such node
    total_bytes: Count = 0
    free_bytes: Count = 0
    managed_bytes: Count = 0  # what llmgw fetched there (the budget counts these)
    budget_bytes: Count | None = None


class FetchStatus(Strict):
    """A file being had for a shard: from the origin, from a peer node, or waited for."""

    source: Text
    state: Literal["waiting", "fetching", "failed"]
    via: Name = ""  # "origin", or the peer node copied from
    done_bytes: Count = 0
    total_bytes: Count | None = None
    rate_bps: float = Field(default=0.0, ge=0, le=1e13)
    eta_s: float | None = Field(default=None, ge=0, le=1e9)
    message: Text = ""  # in the node's words: what it is doing, or why it failed
    reason: Name = ""
    # version 10: for a model directory (a hub source), its files whole and in all
    done_files: int = Field(default=0, ge=0, le=MAX_FILES)
    total_files: int | None = Field(default=None, ge=0, le=MAX_FILES)

    def words(self) -> str:
        """"copying from node02: 1.2 GB of 4.0 GB at 80 MB/s, about 35 s left", or the message as it is."""
        if self.state != "fetching":
            return self.message
        of = f" of {mb(self.total_bytes)}" if self.total_bytes else ""
        if self.total_files:
            of += f" ({self.done_files} of {self.total_files} files)"
        rate = f" at {mb(self.rate_bps)}/s" if self.rate_bps else ""
        eta = f", about {self.eta_s:.0f} s left" if self.eta_s is not None else ""
        return f"{self.message}: {mb(self.done_bytes)}{of}{rate}{eta}"


class InstallStatus(Strict):
    """An engine install under way, as numbers (install_progress has it in words)."""

    engine: Name
    version: Name = ""
    step: Literal["downloading", "unpacking", "installing", "checking"] = "installing"
    done_bytes: Count = 0
    total_bytes: Count | None = None


class NodeReport(Strict):
    version: int = WIRE_VERSION
    node_id: Name = Field(min_length=1)
    address: Address
    agent_version: Name = ""
    hardware: Hardware
    engines_probed: bool = False  # False: "never probed", which is not "has none"
    engines: Annotated[list[EngineStatus], Field(max_length=16)] = []
    install_progress: Texts = []
    installs: Annotated[list[InstallStatus], Field(max_length=16)] = []
    fabrics: Annotated[list[Fabric], Field(max_length=16)] = []
    weights: Annotated[list[Text], Field(max_length=1024)] = []  # sources this node holds whole on disk
    weights_dirs: Annotated[list[WeightsDir], Field(max_length=64)] = []
    fetches: Annotated[list[FetchStatus], Field(max_length=64)] = []
    peer_port: int = Field(default=0, ge=0, le=65535)  # where it serves weights to its fabric's nodes; 0: not
    port_low: Port = 20000  # engines on this node may be given ports in [port_low, port_high]
    port_high: Port = 20999
    shards: Annotated[list[ShardState], Field(max_length=1024)] = []
    problems: Problems = []  # hardware, fabric and discovery trouble, each with a code

    @model_validator(mode="before")
    @classmethod
    def _from_version_1(cls, data: Any) -> Any:
        """Version 1 sent problems as bare words: they keep their words under a generic code."""
        if isinstance(data, dict) and data.get("version") == 1:
            data = dict(data)
            fabric = data.pop("fabric_problems", None) or []
            other = data.pop("warnings", None) or []
            if isinstance(fabric, list) and isinstance(other, list):
                data["problems"] = [{"code": "FabricProblem", "message": str(t)} for t in fabric] + [
                    {"code": "Warning", "message": str(t)} for t in other][:64]
        return data

    @model_validator(mode="after")
    def _port_range(self) -> NodeReport:
        if self.port_low > self.port_high:
            raise ValueError(f"port_low {self.port_low} is above port_high {self.port_high}")
        return self


def is_remote(source: str) -> bool:
    """A model source the nodes fetch themselves (and plan, per fabric, with the control plane): a URL, or a hub id
    (a directory of files)."""
    return source.startswith(("http://", "https://")) or is_hub(source)


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
    peer_ports: list[int] = []  # the port each rank binds for its peers (0: none), by rank; reserved by placement
    rendezvous_port: int | None = None
    fabric_adapters: list[str] = []  # NCCL_IB_HCA for this node
    weights: WeightsPlan | None = None  # version 4: for a source fetched over http(s)
    # the replica's engine secret: the engine answers only requests that carry it, and only the router has it.
    # Never on a command line (other users can read those) and never in a log (repr=False).
    api_key: str = Field(default="", repr=False)
    # version 12 (wire/serving.py): 0 awake; 1 or 2: the engine is to sleep at that level (weights to host memory, or
    # dropped); processes started and ready before the engine; adapters of the model this shard serves
    sleep: Literal[0, 1, 2] = 0
    can_sleep: bool = False  # the engine is started able to sleep (the model has a sleep block and its engine sleeps)
    sidecars: list[SidecarSpec] = []
    adapters: list[AdapterSpec] = []


class DesiredState(Strict):
    version: int = WIRE_VERSION
    node_id: str
    shards: list[ShardSpec] = []
    engines: list[str] = []
    engine_sources: list[EngineSource] = []  # version 3: what each engine is installed from
    # version 4: node ids and certificate serials the control plane has revoked: a node serves them no weights
    revoked: list[str] = []
    heartbeat_interval: float = 3.0
    model_config = WIRE_NAMES
    # version 11 (wire/renewal.py): what the node names in a renewal instead of sending an unchanged report (the
    # token of the report this answers; "" = this control plane takes no renewals: send every report whole), and
    # this desired state's own tag, so a renewal is answered "unchanged" rather than with the same state again
    renewal_token: str = Field(default="", max_length=128, validation_alias=LEASE, serialization_alias=LEASE)
    etag: str = Field(default="", max_length=128)
