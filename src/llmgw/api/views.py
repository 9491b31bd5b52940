"""Rows for people: what ctl and the API show about nodes (and measured ways to ready). Derived, never stored."""

from __future__ import annotations

from pydantic import BaseModel

from llmgw.core.conditions import Condition
from llmgw.core.reasons import Reason
from llmgw.records.state import NodeRecord
from llmgw.wire.messages import EngineStatus, FetchStatus, WeightsDir


class NodeRow(BaseModel):
    node: str
    address: str
    state: str
    gpus: str
    gpu_count: int
    ram: str
    engines: str
    fabrics: str
    warnings: list[str]
    conditions: list[Condition] = []  # the record's own: the same codes /api/status and /metrics carry
    cert_serial: str = ""  # the certificate it last spoke with: `ctl nodes revoke NODE --serial` takes it
    cert_expires: float | None = None
    weights: list[str] = []  # what it holds whole: paths, and URLs it fetched
    weights_dirs: list[WeightsDir] = []
    fetches: list[FetchStatus] = []  # weights arriving (bytes, rate, ETA), waited for, or failed
    # each engine as the node reported it: the build it took and the better builds it passed over, with reasons
    engine_builds: list[EngineStatus] = []


CERT_WARN_S = 14 * 86400


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _engine_state(e: EngineStatus) -> str:
    if e.runs:
        return ""
    return " (installing)" if e.reason == Reason.EngineInstalling else " (cannot run)"


def _engine_line(e: EngineStatus) -> str:
    return " ".join(w for w in (e.name, e.version, e.variant) if w) + _engine_state(e)


def _passed_over(e: EngineStatus) -> list[str]:
    """Every better build a node did not take, with its reason code and its words."""
    return [f"{e.name}: {p.variant} passed over ({p.reason}): {p.message}" for p in e.passed_over]


def _engine_words(e: EngineStatus) -> str:
    """An engine's words as a warning: progress and install failures already say what they are about."""
    if e.reason == Reason.EngineInstalling:
        return e.message
    if e.runs or e.message.startswith("install failed"):
        return f"{e.name}: {e.message}"
    return f"{e.name} cannot run: {e.message}"


def node_row(n: NodeRecord, heard: float | None = None) -> NodeRow:
    """A node as views show it; `heard`: when it was last heard (a renewal moves no record's last_seen)."""
    r = n.report
    hw = r.hardware
    classes: dict[str, int] = {}
    for g in hw.gpus:
        classes[g.gpu_class] = classes.get(g.gpu_class, 0) + 1
    faulty = sum(1 for g in hw.gpus if g.faulty)
    gpus = ", ".join(f"{c}x {k}" for k, c in sorted(classes.items())) or "none"
    if faulty:
        gpus += f" ({faulty} faulty)"
    if not r.engines_probed:
        engines = "not probed yet"
    else:
        engines = ", ".join(_engine_line(e) for e in r.engines)
    warnings = [p.message for p in r.problems]
    warnings += [_engine_words(e) for e in r.engines if e.message]
    warnings += [w for e in r.engines for w in _passed_over(e)]
    shown = {e.message for e in r.engines}
    warnings += [p for p in r.install_progress if p not in shown]
    warnings += [f"weights {f.source}: {f.words()}" for f in r.fetches]
    at = n.last_seen if heard is None else max(heard, n.last_seen)
    if n.cert_not_after is not None and n.cert_not_after - at < CERT_WARN_S:
        days = max(0.0, (n.cert_not_after - at) / 86400)
        warnings.append(f"its certificate expires in {days:.0f} day(s): `llmgw ca renew` it and copy it to the node")
    fabrics = ", ".join(f"{f.name} ({f.rate_gbps:.0f} Gb/s)" for f in r.fabrics) or "-"
    return NodeRow(
        node=n.id,
        address=r.address,
        state="revoked" if n.revoked else ("lost" if n.lost else "live"),
        gpus=gpus,
        gpu_count=len(hw.gpus),
        ram=f"{_gib(hw.mem_available_bytes)} free of {_gib(hw.mem_total_bytes)}",
        engines=engines or "none",
        fabrics=fabrics,
        warnings=warnings,
        conditions=n.conditions,
        cert_serial=n.cert_serial,
        cert_expires=n.cert_not_after,
        weights=r.weights,
        weights_dirs=r.weights_dirs,
        fetches=r.fetches,
        engine_builds=r.engines,
    )


class ReadyTime(BaseModel):
    """One estimate, as /api/status and /metrics show it."""

    model: str
    engine: str
    gpu_class: str
    way: str  # wake, wake2, load_held, load_fetch (reconcile/fastest.py)
    seconds: float
    samples: int
    at: float  # when last measured
