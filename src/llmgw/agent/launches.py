"""A shard's command, from its spec and what this node has: an engine seen to run here and the weights on this
node (fetched first when the source is remote). Not ready yet is an answer (Pending), not a failure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmgw.agent.adapter_files import adapter_paths
from llmgw.agent.engines import ADAPTERS, Launch, LaunchContext
from llmgw.agent.engines.base import Loopback
from llmgw.agent.supervisor.process import state_name
from llmgw.agent.supervisor.supervisor import Pending
from llmgw.agent.weights.fetcher import Failed, Fetcher, Waiting
from llmgw.agent.weights.resolve import resolve_source
from llmgw.wire.messages import EngineStatus, Problem, ShardSpec, is_remote

Resolved = tuple[Launch | None, str | Problem | Pending]


@dataclass(frozen=True)
class Node:
    """What a launch needs of the node that runs it."""

    node_id: str
    address: str
    engines: list[EngineStatus]
    fetcher: Fetcher
    keys_dir: Path  # where each shard's secret file is written
    threads: int = 1  # what an engine computing on the CPU uses (agent.yaml engine_threads, else the cores it may use)


def engine_binary(engines: list[EngineStatus], name: str) -> str | None:
    return next((e.path for e in engines if e.name == name and e.runs), None)


def weights_path(spec: ShardSpec, fetcher: Fetcher) -> str | Problem | Pending:
    """The file or directory the engine loads, or why there is none yet."""
    if is_remote(spec.source):
        got = fetcher.ensure(spec.source, spec.weights)
        if isinstance(got, Waiting):
            return Pending(got.message, got.reason)
        if isinstance(got, Failed):
            return Problem(code=got.reason, message=got.message, subject="weights")
        return str(got.path)
    found, problem = resolve_source(spec.source)
    if found is None:
        return Problem(code="WeightsUnusable", message=problem, subject="weights")
    return found


def resolve(node: Node, spec: ShardSpec, ports: Loopback | None = None) -> Resolved:
    adapter = ADAPTERS.get(spec.engine)
    if adapter is None:
        return None, f"unknown engine {spec.engine}"
    binary = engine_binary(node.engines, spec.engine)
    if binary is None:
        return None, f"engine {spec.engine} is not installed and running on {node.node_id}"
    path = weights_path(spec, node.fetcher)
    if not isinstance(path, str):
        return None, path
    loras = adapter_paths(spec, node.fetcher)
    if not isinstance(loras, tuple):
        return None, loras
    key_file = str(node.keys_dir / f"{state_name(spec.replica_id, spec.rank)}.key")
    ctx = LaunchContext(binary=binary, model_path=path, host=node.address, threads=node.threads, key_file=key_file,
                        serve_port=ports.engine if ports else 0, peer_tunnels=ports.peers if ports else (),
                        adapters=loras)
    return adapter.launch(spec, ctx), ""
