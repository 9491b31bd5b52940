"""reconcile(world) -> intents. Pure: reads the world, never the clock or the store."""

from __future__ import annotations

import hashlib
import hmac

from llmgw.config.server import ModelSpec
from llmgw.core.backoff import doubling
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.explanation import explanation_lines
from llmgw.core.reasons import Reason
from llmgw.core.state import NodeRecord, ReplicaRecord
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, place, reservations
from llmgw.placement.snapshot import Snapshot, build_snapshot
from llmgw.reconcile.intents import HoldLosses, Intent, MarkLost, PutReplica, Reap, SetScaleTimer
from llmgw.reconcile.scaling import Step, Timer, decide, floor, wanted
from llmgw.reconcile.status import derive, stopped
from llmgw.reconcile.world import World


def _liveness(w: World) -> tuple[list[NodeRecord], list[Intent]]:
    """Nodes silent past node_lost_after are lost, but not when more than half of the live ones (or all, however
    few) fall silent together: then the control plane or its network is the likelier fault, and rebuilding
    everything would make it worse. Nodes close to the limit (within loss_grace) count as silent for that test,
    since nodes cut off at once cross the limit one heartbeat phase apart. Never more than a tenth of the nodes are
    declared lost per pass, longest silent first (Kubernetes' zone rule, in small)."""
    since = max(w.started_at, w.resumed_at)
    limit = w.timings.node_lost_after

    def quiet(n: NodeRecord) -> float:
        return w.now - max(n.last_seen, since)

    live = [n for n in w.nodes if not n.lost]
    near = [n for n in live if quiet(n) > limit - w.timings.loss_grace]
    silent = sorted((n for n in near if quiet(n) > limit), key=lambda n: (n.last_seen, n.id))
    if not silent:
        return list(w.nodes), []
    if len(near) == len(live) or (len(live) >= 3 and len(near) > w.timings.silent_majority * len(live)):
        msg = (f"{len(near)} of {len(live)} live nodes are silent at once: assuming the control plane or its "
               "network is at fault, no node is declared lost until contact returns")
        return list(w.nodes), [HoldLosses(msg)]
    budget = max(1, int(len(w.nodes) * w.timings.lost_per_pass))
    lost_now = {n.id for n in silent[:budget]}
    out: list[NodeRecord] = []
    intents: list[Intent] = []
    for n in w.nodes:
        if n.id in lost_now:
            intents.append(MarkLost(n.id, f"node {n.id} lost: silent for {quiet(n):.0f}s (limit {limit:.0f}s)"))
            n = n.model_copy(update={"lost": True})
        out.append(n)
    return out, intents


EVICTED_FOR = "idle, to make room for "


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
    used = w.last_used.get(r.id)
    if used is not None:
        return used
    return max(r.ready_at or r.created_at, w.started_at)


MAX_KEPT_FAILED = 5  # per model: older failures are reaped even inside keep_failed
NOT_ITS_FAULT = {Reason.NodeLost, Reason.ShardMissing}  # the node went, not the replica: replaced without delay


def _failed_to_keep(w: World, by_id: dict[str, NodeRecord]) -> set[str]:
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


def reconcile(w: World) -> list[Intent]:
    nodes, intents = _liveness(w)
    by_id = {n.id: n for n in nodes}
    current: dict[str, ReplicaRecord] = {}
    events: dict[str, str] = {}

    # 1. status of what exists, and reaping of what was let go
    kept = _failed_to_keep(w, by_id)
    for r in w.replicas:
        if r.failed or r.stop is not None:
            if not _still_running(r, by_id):
                if r.id in kept:
                    current[r.id] = r if r.released else r.model_copy(update={"released": True})
                    continue
                why = f"{r.stop.reason}: {r.stop.message}" if r.stop is not None else "failed"
                intents.append(Reap(r.id, f"replica {r.id} of {r.model} reaped ({why})"))
                continue
            current[r.id] = r
            continue
        spec = w.models.get(r.model)
        if spec is None:
            current[r.id] = stopped(r, Reason.Removed, f"model {r.model} is no longer in the catalog", w.now)
            events[r.id] = f"replica {r.id} stopping: model {r.model} removed from the catalog"
            continue
        d = derive(r, by_id, w.now)
        if d.failed and not r.failed:
            c = d.conditions[-1] if d.conditions else None
            events[r.id] = f"replica {r.id} of {r.model} failed: {c.message if c else ''}"
        elif d.ready and not r.ready:
            events[r.id] = f"replica {r.id} of {r.model} ready at {d.endpoint}"
        current[r.id] = d

    # 2. scaling per model
    taken = {r.id for r in w.replicas}
    added: dict[str, str] = {}  # new replica -> why, when scaling on load added it
    for name, spec in w.models.items():
        active = sorted(
            (r for r in current.values() if r.model == name and not r.failed and r.stop is None),
            key=lambda r: (r.created_at, r.id),
        )
        demanded = w.now - w.demand.get(name, float("-inf")) <= w.timings.demand_window
        if spec.on_demand:
            # a replica with a request in flight is in use, however long ago that request began
            keep = [r for r in active if w.outstanding.get(r.id, 0) > 0
                    or w.now - _last_activity(r, w) < spec.scaling.idle_timeout]
            for r in active:
                # a replica still loading (placed or not) while requests keep asking is wanted, not idle
                if r not in keep and not (demanded and not r.ready):
                    idle = w.now - _last_activity(r, w)
                    current[r.id] = stopped(r, Reason.Idle, f"unused for {idle:.0f}s", w.now)
                    events[r.id] = f"replica {r.id} of {name} stopping: idle for {idle:.0f}s"
            active = [r for r in active if current[r.id].stop is None]
        step, added_event, down_why = Step.Hold, "", ""
        if spec.scaling.target_in_flight is not None:
            step, added_event, down_why = _on_load(name, spec, active, demanded, w, intents)
        want = wanted(spec, active=len(active), ready=sum(1 for r in active if r.ready), demanded=demanded,
                      step=step)
        added_why = step.value if step is Step.Up else ""
        if want > len(active) and _backing_off(name, current, w):
            want = len(active)  # failing again and again: the next try waits (CrashLoopBackOff, in small)
        for r in active[want:][::-1]:
            why = down_why or f"{len(active)} running, max {spec.scaling.max}"
            current[r.id] = stopped(r, Reason.ScaledDown, why, w.now)
            events[r.id] = f"replica {r.id} of {name} stopping: scaled down ({why})"
        for _ in range(want - len(active)):
            rid = _new_id(name, w.entropy, taken)
            current[rid] = ReplicaRecord(
                id=rid, model=name, created_at=w.now, shards_expected=spec.profile.nodes,
                secret=_derive(w.entropy, f"secret:{rid}"),
            )
            if added_why:
                added[rid] = added_why
                events[rid] = f"replica {rid} of {name} added: {added_event}"

    # 3. placement of everything still pending, oldest first, on a snapshot updated as we go
    pending = sorted(
        (r for r in current.values() if not (r.placed or r.failed or r.stop is not None)),
        key=lambda r: (r.created_at, r.id),
    )
    # a pass with nothing to place builds no snapshot: at 10,000 nodes that is most of a pass's cost
    snap = build_snapshot(nodes, list(current.values()), w.models, w.now) if pending else None
    evicting = any(r.stop is not None and r.stop.reason == Reason.Evicted for r in current.values())
    failed_on: dict[str, frozenset[str]] = {}
    for f in current.values():  # failed replicas stay on view a while (failed_kept_for): their nodes are avoided
        if f.failed and pending:
            failed_on[f.model] = failed_on.get(f.model, frozenset()) | {a.node_id for a in f.assignments}
    for r in pending:
        assert snap is not None
        spec = w.models[r.model]
        req = Request(replica_id=r.id, model=spec, failed_on=failed_on.get(r.model, frozenset()))
        result = place(req, snap)
        if isinstance(result, Placement):
            conds = set_condition(r.conditions, ConditionType.Scheduled, Status.TRUE, Reason.Placed,
                                  "on " + ", ".join(a.node_id for a in result.assignments), w.now)
            conds = set_condition(conds, ConditionType.Ready, Status.FALSE, Reason.ShardsStarting, "placed", w.now)
            current[r.id] = r.model_copy(update={
                "assignments": result.assignments, "explanation": result.explanation, "conditions": conds,
                "shards_expected": spec.profile.nodes,
            })
            where = ", ".join(a.node_id for a in result.assignments)
            placed = f"replica {r.id} of {spec.name} placed on {where}"
            events[r.id] = f"{events[r.id]}; {placed}" if r.id in events else placed  # after why it was added
            snap = snap.with_reservation(r.id, reservations(req, result.assignments))
            continue
        expl = result.explanation
        first = not expl.same_as(r.explanation)
        if not first:
            assert r.explanation is not None
            expl = r.explanation  # saying it again is no change: no write, no router woken
        why = "; ".join(explanation_lines(expl)[1:3])
        # a model asked for now (on demand) or promised (min >= 1) may have an idle on-demand replica stopped for it
        if not evicting:
            victim = _eviction_victim(req, current, nodes, w, exclude_model=spec.name)
            if victim is not None:
                msg = f"{EVICTED_FOR}{spec.name}"
                current[victim.id] = stopped(victim, Reason.Evicted, msg, w.now, for_model=spec.name)
                events[victim.id] = f"replica {victim.id} of {victim.model} evicted: {msg}"
                evicting = True
        room = next((v for v in current.values() if v.stop is not None and v.stop.for_model == spec.name), None)
        if room is not None:
            why = f"waiting for idle replica {room.id} of {room.model}, evicted to make room, to stop; {why}"
        conds = set_condition(r.conditions, ConditionType.Scheduled, Status.FALSE, Reason.Unschedulable, why, w.now)
        current[r.id] = r.model_copy(update={"explanation": expl, "conditions": conds})
        if first:
            nowhere = f"replica {r.id} of {spec.name} cannot be placed: " + " | ".join(explanation_lines(expl)[1:])
            events[r.id] = f"{events[r.id]}; {nowhere}" if r.id in events else nowhere

    for r in current.values():
        old = next((o for o in w.replicas if o.id == r.id), None)
        if old is None or old != r:
            intents.append(PutReplica(r, events.get(r.id, ""), added.get(r.id, "")))
    return intents


def _on_load(name: str, spec: ModelSpec, active: list[ReplicaRecord], demanded: bool, w: World,
             intents: list[Intent]) -> tuple[Step, str, str]:
    """This pass's step of scaling on load (scaling.py decides; wanted() turns it into a count): (the step, the
    words for a replica it adds, the words for one it removes)."""
    sc = spec.scaling
    assert sc.target_in_flight is not None
    ready = [r for r in active if r.ready]
    timer = w.scale_timers.get(name, Timer())
    d = decide(target=sc.target_in_flight, up_after=sc.scale_up_after, down_after=sc.scale_down_after,
               lo=floor(spec, active=len(active), demanded=demanded), hi=sc.max, ready=len(ready),
               in_flight=float(sum(w.outstanding.get(r.id, 0) for r in ready)), timer=timer, now=w.now)
    if d.timer != timer:
        intents.append(SetScaleTimer(name, d.timer))
    if d.step is Step.Up:
        return d.step, d.message, ""
    if d.step is Step.Down:
        return d.step, "", d.message
    return d.step, "", ""


def _eviction_victim(
    req: Request, current: dict[str, ReplicaRecord], nodes: list[NodeRecord], w: World, exclude_model: str
) -> ReplicaRecord | None:
    """One idle single-node replica of another on-demand model whose removal lets this request fit."""
    candidates = []
    for r in current.values():
        spec: ModelSpec | None = w.models.get(r.model)
        if spec is None or r.model == exclude_model or not spec.on_demand:
            continue  # min >= 1 is a promise that the model stays up
        if not r.ready or len(r.assignments) != 1:
            continue  # a multi-node replica frees several machines and takes long to rebuild
        used = w.last_used.get(r.id)
        if used is None:
            continue  # unknown is not idle: after a restart nothing has reported usage yet
        if w.outstanding.get(r.id, 0) > 0 or w.now - used < w.timings.evict_idle_after:
            continue
        if r.ready_at is not None and w.now - r.ready_at < w.timings.evict_protect:
            continue  # recently started: evicting it now would let two models take turns
        candidates.append((used, r.id, r))
    for _, _, victim in sorted(candidates, key=lambda c: (c[0], c[1])):
        others = [r for r in current.values() if r.id != victim.id]
        snap: Snapshot = build_snapshot(nodes, others, w.models, w.now)
        if isinstance(place(req, snap), Placement):
            return victim
    return None
