"""Does an installed engine still accept every flag llmgw would pass it? Engines rename flags between versions,
and the failure otherwise arrives minutes into a model load, on a node nobody is watching."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llmgw.agent.engines import ADAPTERS, LaunchContext
from llmgw.wire.messages import ShardSpec


@dataclass
class FlagReport:
    engine: str
    flags: list[str]
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing


def widest_spec(engine: str) -> ShardSpec:
    """A leader of a two-node, two-GPU replica of a model that may sleep: a flag used only there is the one nobody
    notices has gone."""
    return ShardSpec(
        replica_id="check", model="check", engine=engine, source="/models/check", rank=0, world_size=2, gpus=[0, 1],
        serve_port=8000, leader_address="10.0.0.1", rendezvous_port=29500, peer_addresses=["10.0.0.1", "10.0.0.2"],
        can_sleep=True,
    )


def single_spec(engine: str) -> ShardSpec:
    """A one-node, one-GPU replica: the flags every model on this engine needs."""
    return ShardSpec(replica_id="check", model="check", engine=engine, source="/models/check", rank=0, world_size=1,
                     gpus=[0], serve_port=8000)


def flags_of(engine: str, multi_node: bool = True) -> list[str]:
    adapter = ADAPTERS[engine]
    spec = widest_spec(engine) if multi_node else single_spec(engine)
    launch = adapter.launch(spec, LaunchContext(binary="engine", model_path="/m", host="0.0.0.0"))
    used = [a for a in launch.argv if a.startswith("-")]
    return sorted(set(used) | (set(adapter.flags()) if multi_node else set()))


def flag_present(flag: str, help_text: str) -> bool:
    """On a word boundary, so --port is not satisfied by --port-range."""
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", help_text) is not None


def check_flags(engine: str, help_text: str, multi_node: bool = True) -> FlagReport:
    """`multi_node` False: only the flags a one-node shard needs (a build without RPC lacks --rpc, and still
    serves every single-node model)."""
    flags = flags_of(engine, multi_node)
    report = FlagReport(engine=engine, flags=flags, missing=[f for f in flags if not flag_present(f, help_text)])
    lines = help_text.count("\n")
    if lines < ADAPTERS[engine].packaging.min_help_lines:
        report.warnings.append(f"help text has only {lines} lines: it may be truncated, and missing flags may be there")
    return report

