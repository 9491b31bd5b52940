"""A pure stand-in for the control plane around reconcile(): it applies intents with reconcile.apply, as
control.plane does, plays the agents (a node runs exactly what it is asked to, and stops the rest), and moves a
fake clock.

No sleeps and no I/O: time is FakeClock's number, handed to World.now.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from llmgw.config.server import ModelSpec
from llmgw.core.clock import FakeClock
from llmgw.core.conditions import ConditionType, get_condition
from llmgw.reconcile.apply import DeleteReplica, Log, State, apply
from llmgw.reconcile.intents import Intent
from llmgw.reconcile.reconcile import reconcile
from llmgw.reconcile.scaling import Timer
from llmgw.reconcile.world import Timings, World
from llmgw.records.state import NodeRecord, ReplicaRecord
from llmgw.wire.messages import ShardState

T0 = 1_800_000_000.0


class Sim:
    def __init__(
        self, models: Iterable[ModelSpec], nodes: Iterable[NodeRecord], *, timings: Timings | None = None,
        clock: FakeClock | None = None,
    ) -> None:
        self.clock = clock or FakeClock(T0)
        self.started_at = self.clock.now()
        self.models = {m.name: m for m in models}
        self.nodes = {n.id: n.model_copy(update={"first_seen": self.now, "last_seen": self.now}) for n in nodes}
        self.replicas: dict[str, ReplicaRecord] = {}
        self.demand: dict[str, float] = {}
        self.last_used: dict[str, float] = {}
        self.outstanding: dict[str, int] = {}
        self.recent: dict[str, float] = {}  # replica id -> requests lately (what preempting it costs)
        self.scale_timers: dict[str, Timer] = {}
        self.timings = timings or Timings()
        self.intents: list[Intent] = []  # every intent so far, in order
        self.holding = ""  # why node losses are held, while they are
        self.events: list[str] = []

    @property
    def now(self) -> float:
        return self.clock.now()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def world(self) -> World:
        return World(
            now=self.now, started_at=self.started_at, models=dict(self.models), nodes=list(self.nodes.values()),
            replicas=list(self.replicas.values()), demand=dict(self.demand), last_used=dict(self.last_used),
            outstanding=dict(self.outstanding), recent_requests=dict(self.recent), timings=self.timings,
            entropy=self._entropy(), scale_timers=dict(self.scale_timers),
        )

    def _entropy(self) -> bytes:
        """Different bytes every pass, the same in every run: ids never repeat and tests stay reproducible."""
        self._passes = getattr(self, "_passes", 0) + 1
        return hashlib.sha256(f"pass {self._passes}".encode()).digest()

    def step(self) -> list[Intent]:
        """One reconcile pass, applied."""
        out = reconcile(self.world())
        done = apply(State(now=self.now, models=self.models, nodes=self.nodes, replicas=self.replicas,
                           demand=self.demand, holding=self.holding, scale_timers=self.scale_timers), out)
        s = done.state
        self.nodes, self.replicas, self.demand = dict(s.nodes), dict(s.replicas), dict(s.demand)
        self.holding, self.scale_timers = s.holding, dict(s.scale_timers)
        for e in done.effects:
            if isinstance(e, Log) and e.kind != "control":
                self.events.append(e.message)
            elif isinstance(e, DeleteReplica):
                self.last_used.pop(e.replica_id, None)
                self.outstanding.pop(e.replica_id, None)
        self.intents.extend(out)
        return out

    # ------------------------------------------------------------ the agents

    def desired_on(self, node_id: str) -> list[tuple[ReplicaRecord, int, int | None]]:
        """(replica, rank, serve port) this node is asked to run: placed, neither failed nor stopping."""
        out = []
        for r in self.replicas.values():
            if r.failed or r.stop is not None:
                continue
            for a in r.assignments:
                if a.node_id == node_id:
                    out.append((r, a.rank, a.serve_port))
        return out

    def heartbeat(self, *node_ids: str, **kw: object) -> None:
        """These nodes (all, when none is named) report now; see report()."""
        self.report(node_ids or tuple(self.nodes), **kw)  # type: ignore[arg-type]

    def report(self, node_ids: Iterable[str], state: str = "ready",
               overrides: dict[tuple[str, int], str] | None = None, keep: Iterable[tuple[str, int]] = ()) -> None:
        """The nodes report now, running what they are asked to in `state` (rank > 0 without a port: running).

        overrides: (replica, rank) -> state. keep: (replica, rank) still reported although no longer desired,
        as an agent that has not stopped it yet would.
        """
        overrides = overrides or {}
        keep = set(keep)
        for nid in node_ids:
            rec = self.nodes[nid]
            shards = []
            for r, rank, port in self.desired_on(nid):
                st = overrides.get((r.id, rank), state if port or rank == 0 else "running")
                endpoint = f"http://{rec.report.address}:{port}" if port and st == "ready" else ""
                shards.append(ShardState(replica_id=r.id, rank=rank, state=st, endpoint=endpoint))  # type: ignore[arg-type]
            for s in rec.report.shards:
                if (s.replica_id, s.rank) in keep and all(s.replica_id != x.replica_id for x in shards):
                    shards.append(s)
            report = rec.report.model_copy(update={"shards": shards})
            self.nodes[nid] = rec.model_copy(update={"report": report, "last_seen": self.now, "lost": False})

    def empty(self, node_id: str) -> None:
        """The node reports now, alive and running nothing at all."""
        rec = self.nodes[node_id]
        report = rec.report.model_copy(update={"shards": []})
        self.nodes[node_id] = rec.model_copy(update={"report": report, "last_seen": self.now, "lost": False})

    def run(self, seconds: float, *, every: float = 5.0, silent: Iterable[str] = (), **beat: object) -> None:
        """Time passes in steps: live nodes (all but `silent`) report, then a reconcile pass."""
        quiet = set(silent)
        t = 0.0
        while t < seconds:
            dt = min(every, seconds - t)
            self.advance(dt)
            t += dt
            self.report([n for n in self.nodes if n not in quiet], **beat)  # type: ignore[arg-type]
            self.step()

    # ------------------------------------------------------------ reading

    def of(self, model: str) -> list[ReplicaRecord]:
        return sorted((r for r in self.replicas.values() if r.model == model), key=lambda r: (r.created_at, r.id))

    def live(self, model: str) -> list[ReplicaRecord]:
        return [r for r in self.of(model) if not r.failed and r.stop is None]

    @staticmethod
    def ready_reason(r: ReplicaRecord) -> str:
        c = get_condition(r.conditions, ConditionType.Ready)
        return c.reason if c else ""

    @staticmethod
    def scheduled(r: ReplicaRecord) -> tuple[str, str] | None:
        c = get_condition(r.conditions, ConditionType.Scheduled)
        return (c.status.value, c.reason) if c else None

    def start(self, *names: str) -> dict[str, str]:
        """Bring these models up (asking for the on-demand ones): model -> its ready replica id."""
        for name in names:
            self.demand[name] = self.now
        self.step()
        self.advance(5)
        self.heartbeat()
        self.step()
        out = {}
        for name in names:
            (r,) = self.live(name)
            assert r.ready, f"{name} did not come up"
            out[name] = r.id
        return out
