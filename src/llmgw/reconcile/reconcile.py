"""reconcile(world) -> intents. Pure: reads the world, never the clock or the store.

A pass runs in stages, each reading what the earlier ones decided: nodes lost, replicas let go (reaped or kept on
view), status of the rest (failed, ready, removed from the catalog), scaling, then placement, with eviction for a
request that fits nowhere.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from llmgw.config.server import ModelSpec
from llmgw.core.backoff import doubling
from llmgw.core.conditions import ConditionType
from llmgw.core.explanation import Explanation
from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request, cpu_build_words
from llmgw.placement.place import Placement, place, reservations
from llmgw.placement.snapshot import build_snapshot
from llmgw.reconcile import fastest, sleeping
from llmgw.reconcile.eviction import victim
from llmgw.reconcile.intents import (
    Add,
    Evict,
    Fail,
    HoldLosses,
    Intent,
    MarkLost,
    Place,
    Reap,
    Release,
    ReplicaIntent,
    SetScaleTimer,
    Stop,
    Unplaced,
)
from llmgw.reconcile.preemption import Tried, hold_room, make_room, making_room, placing_order
from llmgw.reconcile.scaling import Step, Timer, decide, floor, wanted
from llmgw.reconcile.status import observe
from llmgw.reconcile.transitions import EVICTED_FOR as EVICTED_FOR
from llmgw.reconcile.transitions import after
from llmgw.reconcile.world import World
from llmgw.records.state import NodeRecord, ReplicaRecord

MAX_KEPT_FAILED = 5  # per model: older failures are reaped even inside keep_failed
NOT_ITS_FAULT = {Reason.NodeLost, Reason.ShardMissing}  # the node went, not the replica: replaced without delay


@dataclass
class Pass:
    """One pass's working state: the replicas as decided so far, and the intents that decided them."""

    w: World
    nodes: list[NodeRecord]
    by_id: dict[str, NodeRecord]
    current: dict[str, ReplicaRecord]
    intents: list[Intent] = field(default_factory=list)

    def do(self, i: Intent) -> None:
        """Decide: the intent is kept, and `current` shows its effect. A replica intent that changes nothing (the
        same readiness, the same refusal) is dropped: there is nothing to write."""
        if isinstance(i, Reap):
            self.current.pop(i.replica_id, None)
        elif isinstance(i, ReplicaIntent):
            old = self.current.get(i.replica_id)
            new = after(old, i, self.w.now)
            if new == old:
                return
            self.current[i.replica_id] = new
        self.intents.append(i)


def reconcile(w: World) -> list[Intent]:
    nodes, intents = _liveness(w)
    p = Pass(w, nodes, {n.id: n for n in nodes}, {r.id: r for r in w.replicas}, intents)
    _let_go(p)
    _status(p)
    taken = {r.id for r in w.replicas}
    for name, spec in w.models.items():
        _scale(p, name, spec, taken)
    _place_pending(p)
    for evicted in sleeping.taken(p.current):  # a sleeper's GPUs given to another: it stops
        p.do(evicted)
    return p.intents


def _liveness(w: World) -> tuple[list[NodeRecord], list[Intent]]:
    """Nodes silent past node_lost_after are lost, but not when more than half of the live ones (or all, however
    few) fall silent together: then the control plane or its network is the likelier fault, and rebuilding
    everything would make it worse. Nodes close to the limit (within loss_grace) count as silent for that test,
    since nodes cut off at once cross the limit one heartbeat phase apart. Never more than a tenth of the nodes are
    declared lost per pass, longest silent first (Kubernetes' zone rule, in small)."""
    since = max(w.started_at, w.resumed_at)
    limit = w.timings.node_lost_after

    def quiet(n: NodeRecord) -> float:
        return w.now - max(w.heard(n), since)

    live = [n for n in w.nodes if not n.lost]
    near = [n for n in live if quiet(n) > limit - w.timings.loss_grace]
    silent = sorted((n for n in near if quiet(n) > limit), key=lambda n: (w.heard(n), n.id))
    if not silent:
        return list(w.nodes), []
    if len(near) == len(live) or (len(live) >= 3 and len(near) > w.timings.silent_majority * len(live)):
        return list(w.nodes), [HoldLosses(silent=len(near), live=len(live))]
    budget = max(1, int(len(w.nodes) * w.timings.lost_per_pass))
    lost_now = {n.id for n in silent[:budget]}
    out: list[NodeRecord] = []
    intents: list[Intent] = []
    for n in w.nodes:
        if n.id in lost_now:
            intents.append(MarkLost(n.id, silent_for=quiet(n), limit=limit))
            n = n.model_copy(update={"lost": True})
        out.append(n)
    return out, intents


def _let_go(p: Pass) -> None:
    """Failed and stopping replicas whose shards are gone: reaped, or kept on view a while holding nothing."""
    kept = _failed_to_keep(p.w)
    for r in p.w.replicas:
        if (r.failed or r.stop is not None) and not _still_running(r, p.by_id):
            p.do(Release(r.id) if r.id in kept else Reap(r.id))


def _status(p: Pass) -> None:
    """Live replicas: removed from the catalog, or failed, ready or starting as their nodes report."""
    for r in list(p.current.values()):
        if r.failed or r.stop is not None:
            continue
        if r.model not in p.w.models:
            p.do(Stop(r.id, Reason.Removed))
            continue
        spec = p.w.models[r.model]
        lost_gpus = _on_a_cpu_build(r, spec, p.by_id)
        if lost_gpus is not None:
            p.do(Fail(r.id, Reason.NoGPUBuild, lost_gpus))
            continue
        seen = observe(r, p.by_id, [a.name for a in spec.adapters])
        if seen is not None:
            p.do(sleeping.while_asleep(r, seen))


def _on_a_cpu_build(r: ReplicaRecord, spec: ModelSpec, by_id: dict[str, NodeRecord]) -> str | None:
    """A replica that holds GPUs on a node whose build of its engine is now a CPU one (its GPU build failed there,
    or an upgrade offered none for its driver): why it must be placed again, or None."""
    if spec.profile.gpus_per_shard == 0:
        return None
    for a in r.assignments:
        n = by_id.get(a.node_id)
        e = next((e for e in n.report.engines if e.name == spec.engine), None) if n is not None else None
        words = cpu_build_words(e) if e is not None else None
        if words is not None:
            return f"node {a.node_id} (rank {a.rank}): {words}"
    return None


def _still_running(r: ReplicaRecord, by_id: dict[str, NodeRecord]) -> bool:
    """Whether a node the replica was placed on still reports one of its shards. Only those nodes count: any other
    node naming the replica is making a claim about somebody else's hardware."""
    for a in r.assignments:
        n = by_id.get(a.node_id)
        if n is not None and not n.lost and any(s.replica_id == r.id for s in n.report.shards):
            return True
    return False


def _last_activity(r: ReplicaRecord, w: World) -> float:
    """The idle timer runs from the last request; with none known, from readiness or our own start."""
    woken = r.woken_at or float("-inf")  # a wake is a request's: one slower than the demand window runs on
    used = w.last_used.get(r.id)
    if used is not None:
        return max(used, woken)
    return max(r.ready_at or r.created_at, w.started_at, woken)


def _failed_to_keep(w: World) -> set[str]:
    """Failed replicas whose shards are gone that stay on view: failed within keep_failed, the newest few a model."""
    by_model: dict[str, list[ReplicaRecord]] = {}
    for r in w.replicas:
        if r.failed and r.stop is None and r.failed_at is not None and w.now - r.failed_at < w.timings.keep_failed:
            by_model.setdefault(r.model, []).append(r)
    out: set[str] = set()
    for reps in by_model.values():
        reps.sort(key=lambda r: (r.failed_at or 0.0, r.id), reverse=True)
        out.update(r.id for r in reps[:MAX_KEPT_FAILED])
    return out


def _backing_off(model: str, current: dict[str, ReplicaRecord], w: World) -> bool:
    """Whether the model's replacements wait: from its second failure in a row (of its own making: a node lost is
    not), the next try waits retry_base, doubling with each failure kept on view, never beyond keep_failed."""
    failures: list[float] = sorted(
        (r.failed_at for r in current.values() if r.model == model and r.failed and r.failed_at is not None
         and (c := r.condition(ConditionType.Ready)) is not None and c.reason not in NOT_ITS_FAULT),
        reverse=True,
    )
    if len(failures) < 2:
        return False
    delay = doubling(w.timings.retry_base, w.timings.keep_failed, len(failures) - 2)
    return w.now - failures[0] < delay


def _scale(p: Pass, name: str, spec: ModelSpec, taken: set[str]) -> None:
    """One model's count: idle on-demand replicas stop, then wanted() says how many run; the newest go first."""
    w = p.w
    active = sorted(
        (r for r in p.current.values() if r.model == name and not r.failed and r.stop is None),
        key=lambda r: (r.created_at, r.id),
    )
    demanded = w.now - w.demand.get(name, float("-inf")) <= w.timings.demand_window
    asleep = [r for r in active if r.sleep_level]
    if spec.on_demand or asleep:  # a sleeper of a model made promised is woken (or stopped): a promise stays awake
        awake = [r for r in active if not r.sleep_level]
        awake = _stop_idle(p, spec, awake, demanded) if spec.on_demand else awake
        held = sleeping.held_gpus(p.current) if asleep else {}
        if demanded and not awake:  # the fastest way to ready: a sleeper's wake, or a load measured faster
            for faster in fastest.instead_of_waking(w, p.by_id, p.current, spec, asleep, held):
                p.do(faster)
            asleep = [r for r in asleep if p.current[r.id].stop is None]
        for i in sleeping.keep_asleep(w, spec, asleep, len(awake), demanded or not spec.on_demand, held):
            p.do(i)
        active = [r for r in active if r.id in p.current and p.current[r.id].stop is None]
    step, words = Step.Hold, ""
    if spec.scaling.target_in_flight is not None:
        step, words = _on_load(p, name, spec, active, demanded)
        if step is Step.Up and sleeping.woken_for_load(w, spec, active, p.current, p.do):
            step, words = Step.Hold, ""  # a sleeper woke for it: no replica more
        active = [r for r in active if r.id in p.current and p.current[r.id].stop is None]
    want = wanted(spec, active=len(active), ready=sum(1 for r in active if r.ready), demanded=demanded, step=step)
    if want > len(active) and _backing_off(name, p.current, w):
        want = len(active)  # failing again and again: the next try waits (CrashLoopBackOff, in small)
    for r in active[want:][::-1]:
        why = (words if step is Step.Down else "") or f"{len(active)} running, max {spec.scaling.max}"
        p.do(Stop(r.id, Reason.ScaledDown, why))
    for _ in range(want - len(active)):
        rid = _new_id(name, w.entropy, taken)
        p.do(Add(rid, name, spec.profile.nodes, _derive(w.entropy, f"secret:{rid}"),
                 step=step if step is Step.Up else Step.Hold, words=words if step is Step.Up else ""))


def _stop_idle(p: Pass, spec: ModelSpec, active: list[ReplicaRecord], demanded: bool) -> list[ReplicaRecord]:
    """An on-demand model's replicas unused for its stop_unused_after stop; the rest are returned."""
    w = p.w
    left = []
    for r in active:
        # a replica with a request in flight is in use, however long ago that request began; one still loading
        # (placed or not) while requests keep asking is wanted, not idle
        idle = w.now - _last_activity(r, w)
        if w.outstanding.get(r.id, 0) > 0 or idle < spec.scaling.stop_unused_after or (demanded and not r.ready):
            left.append(r)
            continue
        demoted = sleeping.demote(w, p.by_id, p.current, spec, r, idle)
        if demoted is not None:
            p.do(demoted)
        if not isinstance(demoted, Stop):
            left.append(r)
    return left


def _on_load(p: Pass, name: str, spec: ModelSpec, active: list[ReplicaRecord],
             demanded: bool) -> tuple[Step, str]:
    """This pass's step of scaling on load (scaling.py decides; wanted() turns it into a count), and its words."""
    w, sc = p.w, spec.scaling
    assert sc.target_in_flight is not None
    ready = [r for r in active if r.ready]
    timer = w.scale_timers.get(name, Timer())
    d = decide(target=sc.target_in_flight, up_after=sc.scale_up_after, down_after=sc.scale_down_after,
               lo=floor(spec, active=len(active), demanded=demanded), hi=sc.max, ready=len(ready),
               in_flight=float(sum(w.outstanding.get(r.id, 0) for r in ready)), timer=timer, now=w.now)
    if d.timer != timer:
        p.do(SetScaleTimer(name, d.timer))
    return d.step, d.message


def _place_pending(p: Pass) -> None:
    """Everything not yet placed, oldest first, on one snapshot updated as replicas are placed."""
    w = p.w
    pending = sorted(
        (r for r in p.current.values() if not (r.placed or r.failed or r.stop is not None)),
        key=placing_order(p.current, w),  # room made for a higher priority goes to it first
    )
    if not pending:
        return  # a pass with nothing to place builds no snapshot: at 10,000 nodes that is most of a pass's cost
    snap = build_snapshot(p.nodes, list(p.current.values()), w.models, w.now)
    evicting = any(r.stop is not None and r.stop.reason == Reason.Evicted for r in p.current.values())
    failed_on: dict[str, frozenset[str]] = {}
    tried = Tried()  # what preemption learned this pass, for the replicas after
    claimed: set[str] = set()  # victims whose room a replica waiting on them holds, this pass
    for f in p.current.values():  # failed replicas stay on view a while (failed_kept_for): their nodes are avoided
        if f.failed:
            failed_on[f.model] = failed_on.get(f.model, frozenset()) | {a.node_id for a in f.assignments}
    for r in pending:
        spec = w.models[r.model]
        if r.model in w.unresolved:
            reason, words = w.unresolved[r.model]
            p.do(Unplaced(r.id, Explanation(model=r.model, at=w.now, placed=False), reason=reason, words=words))
            continue
        req = Request(replica_id=r.id, model=spec, failed_on=failed_on.get(r.model, frozenset()))
        result = place(req, snap)
        if isinstance(result, Placement):
            p.do(Place(r.id, tuple(result.assignments), result.explanation, spec.profile.nodes))
            snap = snap.with_reservation(r.id, reservations(req, result.assignments))
            continue
        # a model asked for now (on demand) or promised (min >= 1) may have an idle on-demand replica stopped for it
        if not evicting and not making_room(spec.name, p.current, claimed):
            v = victim(req, snap, p.current, p.by_id, w)
            if v is not None:
                p.do(Evict(v.id, spec.name))
                evicting = True
        room = next((v for v in p.current.values() if v.stop is not None and v.stop.for_model == spec.name
                     and v.stop.reason == Reason.Evicted), None)
        # a higher priority takes the room of lower ones, idle or not
        to_sleep = sleeping.preempt_to_sleep(w, p.by_id, p.current, p.do)  # victims that can sleep do
        waits = make_room(req, snap, p.current, p.by_id, w, to_sleep, tried, claimed) if room is None else ()
        snap = hold_room(req, snap, p.current, p.by_id, w, waits, claimed)  # what is freed for it is not given away
        p.do(Unplaced(r.id, result.explanation, room.id if room else "", room.model if room else "", waits=waits))


def _new_id(model: str, entropy: bytes, taken: set[str]) -> str:
    n = 0
    while True:
        rid = f"{model}-{_derive(entropy, f'id:{model}:{n}')[:12]}"
        n += 1
        if rid not in taken:
            taken.add(rid)
            return rid


def _derive(entropy: bytes, label: str) -> str:
    return hmac.new(entropy, label.encode(), hashlib.sha256).hexdigest()
