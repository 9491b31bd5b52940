"""A shard's LoRA adapters as files on this node: each had like the weights (fetched by its plan when remote,
once per fabric), all of them before the engine starts, since it loads them at start."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from llmgw.agent.supervisor.supervisor import Pending
from llmgw.agent.weights import local
from llmgw.agent.weights.fetcher import Failed, Fetcher, Waiting
from llmgw.agent.weights.resolve import resolve_source
from llmgw.core.reasons import Reason
from llmgw.wire.messages import Problem, ShardSpec, is_remote


def adapter_paths(spec: ShardSpec, fetcher: Fetcher) -> tuple[str, ...] | Problem | Pending:
    """Each adapter's file, in the spec's order, or why they are not all here yet."""
    paths: list[str] = []
    for a in spec.adapters:
        if is_remote(a.source):
            got = fetcher.ensure(a.source, a.weights)
            if isinstance(got, Waiting):
                return Pending(f"adapter {a.name}: {got.message}", got.reason)
            if isinstance(got, Failed):
                return Problem(code=Reason.AdapterFailed, message=f"adapter {a.name}: {got.message}",
                               subject="adapters")
            paths.append(str(got.path))
            continue
        found, problem = resolve_source(a.source)
        if found is None:
            return Problem(code=Reason.AdapterFailed, message=f"adapter {a.name}: {problem}", subject="adapters")
        paths.append(found)
    return tuple(paths)


def adapter_sources(shards: Iterable[ShardSpec]) -> set[str]:
    """The remote adapter files the shards use: fetches kept going."""
    return {a.source for s in shards for a in s.adapters if is_remote(a.source)}


def adapters_in_use(weights_dir: Path, spec: ShardSpec) -> set[Path]:
    """Where the shard's fetched adapter files are: never removed to make room while it runs."""
    return {local.target_for(weights_dir, a.source) for a in spec.adapters if is_remote(a.source)}
