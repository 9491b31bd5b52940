"""A node's conditions, derived from its last report and our bookkeeping. Pure: same record, same answer.

Each condition says one thing, with a code and the node's own words: True where it holds, False where it does not,
and Unknown where nobody knows yet (engines never probed, a card discovery could not read), never a guess.
"""

from __future__ import annotations

from llmgw.core.conditions import Condition, ConditionType, Status, set_condition
from llmgw.core.reasons import Reason, reason_or
from llmgw.wire.messages import NodeReport, Problem

Verdict = tuple[Status, Reason, str]

FABRIC_CODES = {Reason.FabricAdapterMissing, Reason.FabricPortNotActive, Reason.FabricProblem}
# what a node may say of an engine that fails, or is not there yet
ENGINE_REASONS = {
    Reason.EngineCannotRun, Reason.EngineFlagsMissing, Reason.EngineInstalling, Reason.EngineInstallFailed,
    Reason.DigestMismatch, Reason.ArchiveUnsafe, Reason.DownloadFailed, Reason.MissingLibraries,
    Reason.PackagesFailed, Reason.NoBuildForNode, Reason.DiskFull,
}


def _of(problems: list[Problem], *codes: Reason) -> list[Problem]:
    return [p for p in problems if p.code in codes]


def _ready(lost: bool, revoked: str) -> Verdict:
    if revoked:
        return Status.FALSE, Reason.NodeRevoked, f"revoked by an operator: {revoked}"
    if lost:
        return Status.FALSE, Reason.NodeLost, "stopped reporting"
    return Status.TRUE, Reason.NodeReady, "reporting"


def _discovered(r: NodeReport) -> Verdict:
    failed = _of(r.problems, Reason.DiscoveryFailed)
    if failed:
        return Status.FALSE, Reason.DiscoveryFailed, "; ".join(p.message for p in failed)
    return Status.TRUE, Reason.ProbeCompleted, ""


def _engines(r: NodeReport) -> Verdict:
    if not r.engines_probed:
        return Status.UNKNOWN, Reason.EngineNotProbed, "has not probed its engines yet (never probed is not has none)"
    if not r.engines:
        return Status.FALSE, Reason.NoEngine, "no engine installed"
    broken = [e for e in r.engines if not e.runs]
    if broken:
        e = broken[0]
        words = "; ".join(f"{b.name} {b.version}".strip() + f": {b.message}" for b in broken)
        code = reason_or(e.reason, Reason.EngineCannotRun)
        return Status.FALSE, code if code in ENGINE_REASONS else Reason.EngineCannotRun, words
    unsure = [e for e in r.engines if e.reason == Reason.EngineCheckInconclusive]
    if unsure:
        words = "; ".join(f"{e.name} {e.version}".strip() + f": {e.message}" for e in unsure)
        return Status.UNKNOWN, Reason.EngineCheckInconclusive, words
    return Status.TRUE, Reason.EnginesRun, ", ".join(f"{e.name} {e.version}".strip() for e in r.engines)


def _fabrics(r: NodeReport) -> Verdict:
    bad = [p for p in r.problems if reason_or(p.code, Reason.NodeReady) in FABRIC_CODES]
    if bad:
        return Status.FALSE, reason_or(bad[0].code, Reason.FabricProblem), "; ".join(p.message for p in bad)
    if not r.fabrics:
        return Status.TRUE, Reason.NoFabricDeclared, ""
    return Status.TRUE, Reason.FabricsActive, ", ".join(f.name for f in r.fabrics)


def _gpus(r: NodeReport) -> Verdict:
    hw = r.hardware
    faulty = [g for g in hw.gpus if g.faulty]
    if faulty:
        words = "; ".join(f"GPU {g.index} ({g.gpu_class}): {g.fault or 'reported faulty'}" for g in faulty)
        return Status.FALSE, Reason.GPUFaulty, words
    trouble = _of(r.problems, Reason.GPUDiscoveryProblem)
    if trouble or hw.gpu_problems:
        words = "; ".join([p.message for p in trouble] or list(hw.gpu_problems))
        return Status.UNKNOWN, Reason.GPUDiscoveryProblem, words
    if not hw.gpus:
        return Status.TRUE, Reason.NoGPUs, ""
    return Status.TRUE, Reason.GPUsOK, f"{len(hw.gpus)} healthy"


def _cpu(r: NodeReport) -> Verdict:
    cpu = r.hardware.cpu
    if cpu.cores == 0:
        return Status.UNKNOWN, Reason.CPUUnknown, "cpuinfo was not read"
    if r.hardware.lacks_avx2:  # from the hardware itself: a version-1 node sends its warning with no code
        no_avx2 = _of(r.problems, Reason.NoAVX2)
        return Status.FALSE, Reason.NoAVX2, no_avx2[0].message if no_avx2 else "no AVX2"
    have = [name for name, on in (("AVX2", cpu.avx2), ("AVX-512", cpu.avx512f), ("AMX", cpu.amx)) if on]
    if not have:
        return Status.TRUE, Reason.NotX86, r.hardware.arch
    return Status.TRUE, Reason.VectorExtensions, ", ".join(have)


def node_conditions(
    old: list[Condition], report: NodeReport, *, lost: bool, revoked: str, now: float
) -> list[Condition]:
    verdicts: list[tuple[ConditionType, Verdict]] = [
        (ConditionType.Ready, _ready(lost, revoked)),
        (ConditionType.Discovered, _discovered(report)),
        (ConditionType.EnginesReady, _engines(report)),
        (ConditionType.FabricsReady, _fabrics(report)),
        (ConditionType.GPUsHealthy, _gpus(report)),
        (ConditionType.CPUFeatures, _cpu(report)),
    ]
    out = list(old)
    for type_, (status, reason, message) in verdicts:
        out = set_condition(out, type_, status, reason, message[:2048], now)
    return out
