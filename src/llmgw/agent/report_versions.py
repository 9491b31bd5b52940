"""A report in an older wire version, for a control plane that reads no newer one (agents upgraded first).

Each version from OLDEST_WRITTEN on is the same report less the fields later versions added: ADDED names them, per
version, as pydantic's `exclude` does (a field, or a model's fields under its name). A field added to NodeReport or
to a model in it goes into ADDED under its version; tests/agent/test_report_versions.py holds the table to the
release it was written against.
"""

from __future__ import annotations

from typing import Any

from llmgw.wire.messages import WIRE_VERSION, NodeReport, ShardState

OLDEST_WRITTEN = 10  # before it, reports differed in more than added fields: such a control plane is refused
# what each version added to the report, from OLDEST_WRITTEN + 1 on (11, renewals, added no field; 12 the adapters a
# shard's engine loaded)
ADDED: dict[int, dict[str, Any]] = {11: {}, 12: {"shards": {"__all__": {"adapters"}}}}
# states a version added, and what an older control plane is told instead: a sleeping shard is not serving and has
# not failed (an older control plane never asks a shard to sleep; this is a shard put to sleep before it came)
STATES_ADDED: dict[int, dict[str, str]] = {12: {"sleeping": "starting"}}


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    for k, v in more.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def left_out(version: int) -> dict[str, Any]:
    """The exclude spec of the fields a report in `version` does not have."""
    out: dict[str, Any] = {}
    for v in sorted(ADDED):
        if v > version:
            _merge(out, ADDED[v])
    return out


def report_in(report: NodeReport, version: int = WIRE_VERSION) -> str:
    """The report as JSON in `version` (OLDEST_WRITTEN to WIRE_VERSION)."""
    if version >= WIRE_VERSION:
        return report.model_dump_json()
    if version < OLDEST_WRITTEN:
        raise ValueError(f"no report is written in wire version {version} (the oldest is {OLDEST_WRITTEN})")
    older = report.model_copy(update={"version": version, "shards": _states_in(report.shards, version)})
    return older.model_dump_json(exclude=left_out(version) or None)


def _states_in(shards: list[ShardState], version: int) -> list[ShardState]:
    said = {new: old for v, states in STATES_ADDED.items() if v > version for new, old in states.items()}
    return [s.model_copy(update={"state": said[s.state]}) if s.state in said else s for s in shards]
