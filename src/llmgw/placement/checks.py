"""Feasibility checks: can this node take one shard of the request? Order matters: the first that fails wins.

Each check is one object: `prepare(request)` returns its test of one node (run over every node by place(), of one
by `fits`); `explain` gives the node's own words, asked only of the few nodes an explanation shows, so deciding
which nodes fail builds no strings.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar

from llmgw.config.server import ModelSpec
from llmgw.core.reasons import Reason
from llmgw.placement.snapshot import NodeView
from llmgw.wire.hub import is_hub
from llmgw.wire.messages import EngineStatus
from llmgw.wire.serving import SERVING_WIRE_VERSION

Verdict = tuple[Reason, str] | None
HUB_WIRE_VERSION = 10  # the first agents that fetch a hub model's directory
Test = Callable[[NodeView], bool]


@dataclass(frozen=True)
class Request:
    replica_id: str
    model: ModelSpec
    # nodes where a replica of this model failed lately: placed elsewhere if anywhere else can take it (a crash
    # loop on one node must not be rebuilt on that node for ever), there if nowhere else can
    failed_on: frozenset[str] = frozenset()

    @property
    def multi_node(self) -> bool:
        return self.model.profile.nodes > 1


class Check(ABC):
    """One rule a node must meet. A check's reason never depends on the node, so counts per reason are per check."""

    reason: ClassVar[Reason]

    @abstractmethod
    def prepare(self, r: Request) -> Test | None:
        """The test of a node for this request, or None when no node can fail it (the request does not ask)."""

    @abstractmethod
    def explain(self, n: NodeView, r: Request) -> str:
        """Why this node fails the check, in its own words. Asked only of a node that fails it."""

    def fits(self, n: NodeView, r: Request) -> bool:
        test = self.prepare(r)
        return test is None or test(n)


# C-level getters: these two run on every node of every placement, and need nothing from the request
_live: Test = attrgetter("live")
_probed: Test = attrgetter("engines_probed")


class NodeLive(Check):
    reason = Reason.NodeNotReady

    def prepare(self, r: Request) -> Test:
        return _live

    def explain(self, n: NodeView, r: Request) -> str:
        return n.not_live_reason or "node is not reporting"


class EngineProbed(Check):
    reason = Reason.EngineNotProbed

    def prepare(self, r: Request) -> Test:
        return _probed

    def explain(self, n: NodeView, r: Request) -> str:
        return "has not probed its engines yet (never probed is not has none)"


class EngineInstalled(Check):
    reason = Reason.EngineMissing

    def prepare(self, r: Request) -> Test:
        name = r.model.engine

        def test(n: NodeView) -> bool:
            return name in n.engines

        return test

    def explain(self, n: NodeView, r: Request) -> str:
        if n.install_progress:
            return "; ".join(n.install_progress)
        return f"{r.model.engine} is not installed"


def _engine_test(name: str, ok: Callable[[EngineStatus], bool]) -> Test:
    """Passes a node that reports `name` in a state `ok` accepts, or does not report it (EngineInstalled's)."""

    def test(n: NodeView) -> bool:
        e = n.engines.get(name)
        return e is None or ok(e)

    return test


class EngineBeingInstalled(Check):
    """Not a failure: the node is installing the engine, and says how far it has got."""

    reason = Reason.EngineInstalling

    def prepare(self, r: Request) -> Test:
        return _engine_test(r.model.engine, lambda e: e.reason != Reason.EngineInstalling)

    def explain(self, n: NodeView, r: Request) -> str:
        return n.engines[r.model.engine].message


class EngineRuns(Check):
    reason = Reason.EngineCannotRun

    def prepare(self, r: Request) -> Test:
        return _engine_test(r.model.engine, attrgetter("runs"))

    def explain(self, n: NodeView, r: Request) -> str:
        name = r.model.engine
        e = n.engines[name]
        if e.message.startswith("install failed"):
            return f"{name} {e.version}: {e.message}".replace("  ", " ")
        return f"{name} {e.version} cannot run: {e.message}".replace("  ", " ")


def cpu_build_words(e: EngineStatus) -> str | None:
    """Why a node's build of an engine cannot use GPUs, in the node's words (its variant, each better build it
    passed over and why: driver, CUDA, what was offered); None when it can, or when the node did not say which build
    it took (one named in agent.yaml, the sim engine): the operator's word is taken."""
    if not e.variant.startswith("cpu-"):
        return None
    why = "; ".join(f"{p.variant} passed over ({p.reason}): {p.message}" for p in e.passed_over)
    return (f"its {e.name} {e.version} is the CPU build {e.variant}, which uses no GPU"
            + (f" ({why})" if why else " (no GPU build was offered to it)")).replace("  ", " ")


class GPUBuild(Check):
    """A model that asks for GPUs is not placed where its engine would hold them and compute on the CPU."""

    reason = Reason.NoGPUBuild

    def prepare(self, r: Request) -> Test | None:
        if r.model.profile.gpus_per_shard == 0:
            return None
        return _engine_test(r.model.engine, lambda e: cpu_build_words(e) is None)

    def explain(self, n: NodeView, r: Request) -> str:
        words = cpu_build_words(n.engines[r.model.engine]) or ""
        return f"{words}; the model asks for {r.model.profile.gpus_per_shard} GPU(s) per shard"


class GPUClass(Check):
    reason = Reason.GPUClassMismatch

    def prepare(self, r: Request) -> Test | None:
        want = r.model.profile.gpu_class
        if want is None or r.model.profile.gpus_per_shard == 0:
            return None  # any class will do, or no card is wanted

        def test(n: NodeView) -> bool:
            return want in n.gpu_classes

        return test

    def explain(self, n: NodeView, r: Request) -> str:
        have = sorted(n.gpu_classes)
        return f"has {', '.join(have) or 'no GPUs'}, needs {r.model.profile.gpu_class}"


class NodeWhole(Check):
    reason = Reason.NodeNotWhole

    def prepare(self, r: Request) -> Test:
        if r.multi_node:
            # multi-node replicas take whole nodes: any shard already there is in the way
            def test(n: NodeView) -> bool:
                return not n.held_whole_by and not n.shard_count
        else:

            def test(n: NodeView) -> bool:
                return not n.held_whole_by

        return test

    def explain(self, n: NodeView, r: Request) -> str:
        if n.held_whole_by:
            return f"held whole by multi-node replica {n.held_whole_by}"
        return f"runs {n.shard_count} other shard(s); multi-node replicas take whole nodes"


class GPUsFree(Check):
    reason = Reason.InsufficientGPUs

    def prepare(self, r: Request) -> Test | None:
        need, cls = r.model.profile.gpus_per_shard, r.model.profile.gpu_class
        if need == 0:
            return None

        def test(n: NodeView) -> bool:
            return len(n.free_gpus(cls)) >= need

        return test

    def explain(self, n: NodeView, r: Request) -> str:
        need, cls = r.model.profile.gpus_per_shard, r.model.profile.gpu_class
        faulty = [g for g in n.gpus if g.faulty and (cls is None or g.gpu_class == cls)]
        extra = f"; {len(faulty)} faulty ({faulty[0].fault or 'reported faulty'})" if faulty else ""
        return f"{len(n.free_gpus(cls))} free healthy GPU(s), needs {need}{extra}{_mig_words(n, cls)}"


def _mig_words(n: NodeView, cls: str | None) -> str:
    """Healthy cards cut into MIG instances: present, and not offered whole."""
    cut = [len(g.mig) for g in n.gpus if g.mig is not None and not g.faulty and (cls is None or g.gpu_class == cls)]
    if not cut:
        return ""
    counts = sorted(set(cut))
    made = "no instances made yet" if counts == [0] else "/".join(map(str, counts)) + " instances each"
    return f"; {len(cut)} in MIG mode ({made}; not offered whole)"


class MemoryFits(Check):
    reason = Reason.InsufficientMemory

    def prepare(self, r: Request) -> Test | None:
        need = r.model.profile.memory
        if need == 0:
            return None

        def test(n: NodeView) -> bool:
            return n.mem_total - n.mem_reserved >= need

        return test

    def explain(self, n: NodeView, r: Request) -> str:
        free, need = n.mem_total - n.mem_reserved, r.model.profile.memory
        return f"{free / 2**30:.1f} GiB unreserved memory, needs {need / 2**30:.1f} GiB"


class OneFabric(Check):
    reason = Reason.NoFabric

    def prepare(self, r: Request) -> Test | None:
        if not r.multi_node:
            return None  # a single-node replica talks to no other node

        def test(n: NodeView) -> bool:
            return bool(n.fabrics)

        return test

    def explain(self, n: NodeView, r: Request) -> str:
        return "advertises no fabric with an ACTIVE adapter"


class Ports(Check):
    reason = Reason.NoFreePort

    def prepare(self, r: Request) -> Test:
        def test(n: NodeView) -> bool:
            # counts only ports inside the range: a reported shard may hold one outside it, taking nothing from it
            return n.free_port_count() >= 2

        return test

    def explain(self, n: NodeView, r: Request) -> str:
        return f"no free port in {n.port_low}-{n.port_high}"


def agent_needs(m: ModelSpec) -> tuple[int, str] | None:
    """The wire version an agent must speak to run the model, and what needs it (None: any agent)."""
    needs = [(HUB_WIRE_VERSION, "a hub source (hf://)")] if is_hub(m.source) else []
    if m.sidecars:  # an older agent is sent none and would start the engine alone
        needs.append((SERVING_WIRE_VERSION, "a model with sidecars"))
    if m.adapters:  # an older agent is sent none of them
        needs.append((SERVING_WIRE_VERSION, "a model with LoRA adapters"))
    return max(needs) if needs else None


class AgentNewEnough(Check):
    """The node's agent speaks the wire version the model needs (agent_needs): a hub source is a directory of files
    fetched by an agent of HUB_WIRE_VERSION, sidecars are started by one of SERVING_WIRE_VERSION."""

    reason = Reason.AgentTooOld

    def prepare(self, r: Request) -> Test | None:
        need = agent_needs(r.model)
        if need is None:
            return None
        version = need[0]
        return lambda n: n.wire_version >= version

    def explain(self, n: NodeView, r: Request) -> str:
        version, what = agent_needs(r.model) or (0, "")
        return (f"its agent speaks wire version {n.wire_version}; {what} needs version {version} or later: "
                f"upgrade the agent")


CHECKS: tuple[Check, ...] = (
    NodeLive(),
    AgentNewEnough(),
    EngineProbed(),
    EngineInstalled(),
    EngineBeingInstalled(),
    EngineRuns(),
    GPUBuild(),
    GPUClass(),
    NodeWhole(),
    GPUsFree(),
    MemoryFits(),
    OneFabric(),
    Ports(),
)


def prepared(r: Request) -> list[tuple[Check, Test]]:
    """The checks this request can fail, in order, each with its test made for the request."""
    return [(c, test) for c in CHECKS if (test := c.prepare(r)) is not None]


def feasible(n: NodeView, r: Request) -> Verdict:
    """None if the node can take one shard of the request, else the first failing check's reason and words."""
    for c in CHECKS:
        if not c.fits(n, r):
            return c.reason, c.explain(n, r)
    return None
