"""A node's desired state, derived from the replica records. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from llmgw.config.engines import SLEEPS, TAKES_SPEED_FLAGS
from llmgw.config.server import ModelSpec
from llmgw.records.state import ReplicaRecord
from llmgw.wire.engines import EngineSource
from llmgw.wire.messages import DesiredState, ShardSpec, WeightsPlan
from llmgw.wire.serving import AdapterSpec


def engine_args(spec: ModelSpec) -> list[str]:
    speed = spec.profile.sim.flags() if spec.engine in TAKES_SPEED_FLAGS else []
    return [*spec.profile.args, *speed]


def draining(replicas: list[ReplicaRecord], in_flight: dict[str, int], now: float, timeout: float) -> set[str]:
    """Replicas told to stop whose requests may still finish: out of the routing table already (a stopping replica
    is not ready), their shards kept running while routers have requests on them, up to `timeout` after the stop.
    A failed replica drains nothing: it is not serving."""
    return {r.id for r in replicas
            if r.stop is not None and not r.failed and in_flight.get(r.id, 0) > 0 and now - r.stop.at < timeout}


def desired_for(
    node_id: str, replicas: list[ReplicaRecord], models: dict[str, ModelSpec], engines: list[str],
    interval: float, sources: list[EngineSource] | None = None, weights: dict[str, WeightsPlan] | None = None,
    drain: set[str] | None = None, no_sleep: Mapping[tuple[str, str], str] | None = None,
) -> DesiredState:
    shards: list[ShardSpec] = []
    for r in replicas:
        if r.failed or (r.stop is not None and r.id not in (drain or ())) or not r.assignments:
            continue
        spec = models.get(r.model)
        if spec is None:
            continue
        leader = r.assignments[0]
        peers = [a.address for a in r.assignments]
        peer_ports = [a.worker_port or 0 for a in r.assignments]
        # an engine that refused sleep mode on this node starts there without it (control/nodes/sleep_refusals.py)
        sleeps = spec.sleep is not None and spec.engine in SLEEPS and (node_id, spec.engine) not in (no_sleep or {})
        for a in r.assignments:
            if a.node_id != node_id:
                continue
            shards.append(
                ShardSpec(
                    replica_id=r.id,
                    model=r.model,
                    engine=spec.engine,
                    source=spec.source,
                    rank=a.rank,
                    world_size=len(r.assignments),
                    gpus=a.gpus,
                    args=engine_args(spec),
                    serve_port=a.serve_port,
                    leader_address=leader.address,
                    rendezvous_port=leader.rendezvous_port,
                    peer_addresses=peers,
                    peer_ports=peer_ports,
                    fabric_adapters=a.fabric_adapters,
                    weights=(weights or {}).get(spec.source),
                    api_key=r.secret,
                    sidecars=[c.spec() for c in spec.sidecars],
                    adapters=[AdapterSpec(name=x.name, source=x.source, weights=(weights or {}).get(x.source))
                              for x in spec.adapters],
                    can_sleep=sleeps,
                    sleep=r.sleep_level if sleeps else 0,
                )
            )
    return DesiredState(node_id=node_id, shards=shards, engines=engines, engine_sources=sources or [],
                        heartbeat_interval=interval)
