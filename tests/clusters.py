"""Builders for simulated clusters used by placement and reconcile tests (pure data, no I/O)."""

from __future__ import annotations

from llmgw.config.server import ModelSpec, Profile, Scaling
from llmgw.records.state import NodeRecord
from llmgw.wire.messages import GPU, EngineStatus, Fabric, Hardware, NodeReport, ShardState

GiB = 2**30


def gpus(n: int, cls: str = "H100-80G", nvlink: str = "all", faulty: tuple[int, ...] = ()) -> list[GPU]:
    out = []
    for i in range(n):
        if nvlink == "all":
            peers: list[int] | None = [j for j in range(n) if j != i]
        elif nvlink == "pairs":
            peers = [i ^ 1]
        else:
            peers = None
        out.append(
            GPU(
                index=i,
                name=cls,
                gpu_class=cls,
                memory_mib=81559,
                faulty=i in faulty,
                fault="Xid 79: GPU has fallen off the bus" if i in faulty else "",
                nvlink_peers=peers,
            )
        )
    return out


def node(
    node_id: str,
    *,
    n_gpus: int = 8,
    cls: str = "H100-80G",
    fabric: str | None = None,
    engines: tuple[str, ...] = ("sim", "llamacpp"),
    probed: bool = True,
    nvlink: str = "all",
    faulty: tuple[int, ...] = (),
    weights: tuple[str, ...] = (),
    mem_gib: int = 512,
    seen: float = 0.0,
    lost: bool = False,
    shards: list[ShardState] | None = None,
    address: str | None = None,
) -> NodeRecord:
    report = NodeReport(
        node_id=node_id,
        address=address or f"10.0.0.{abs(hash(node_id)) % 250 + 1}",
        hardware=Hardware(mem_total_bytes=mem_gib * GiB, gpus=gpus(n_gpus, cls, nvlink, faulty)),
        engines_probed=probed,
        engines=[EngineStatus(name=e, version="1", runs=True) for e in engines] if probed else [],
        fabrics=[Fabric(name=fabric, adapters=["mlx5_0", "mlx5_1"], rate_gbps=400.0)] if fabric else [],
        weights=list(weights),
        shards=shards or [],
    )
    return NodeRecord(id=node_id, report=report, first_seen=seen, last_seen=seen, lost=lost)


def model(
    name: str = "m",
    *,
    engine: str = "sim",
    gpus_per_shard: int = 4,
    nodes: int = 1,
    cls: str | None = "H100-80G",
    min_: int = 1,
    max_: int = 1,
    idle: float = 600.0,
    source: str = "/models/m",
) -> ModelSpec:
    return ModelSpec(
        name=name,
        source=source,
        engine=engine,  # type: ignore[arg-type]
        profile=Profile(gpus_per_shard=gpus_per_shard, nodes=nodes, gpu_class=cls),
        scaling=Scaling(min=min_, max=max_, stop_unused_after=idle),
    )
