"""Sleep instead of stopping: an idle replica of an on-demand model with a sleep block sleeps, and wakes on demand.

A replica may sleep when its engine can (config/engines.py SLEEPS), it runs on one node, its model is not pinned,
and the node has room in its share of host memory for sleepers (Timings.sleep_host_share) for the weights it holds
asleep. A sleeper's GPUs count as free for placement (placement/snapshot.py); one whose GPUs another replica took
stops (evicted for that model). A request for the model wakes one sleeper; a sleeper unused for its model's
`stop_after` stops for good. A replica woken or started stays awake at least `min_stay` before it sleeps again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from llmgw.config.engines import SLEEPS
from llmgw.config.server import ModelSpec
from llmgw.core.conditions import Status
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Evict, Fail, Observe, Preempt, Stop
from llmgw.reconcile.sleep_intents import Sleep, Wake
from llmgw.reconcile.world import World
from llmgw.records.state import NodeRecord, ReplicaRecord
from llmgw.wire.serving import SERVING_WIRE_VERSION


def demote(w: World, by_id: Mapping[str, NodeRecord], current: Mapping[str, ReplicaRecord], spec: ModelSpec,
           r: ReplicaRecord, idle: float) -> Sleep | Stop | None:
    """What an idle replica becomes: asleep, stopped (it cannot sleep here), or None: awake a while yet."""
    cfg = spec.sleep
    if cfg is None or not can_sleep(w, by_id, current, spec, r):
        return Stop(r.id, Reason.Idle, f"{idle:.0f}s")
    # awake since ready_at (a wake clears it): its last use may be from before it slept, and the request that woke
    # it may not have reached it yet, so the idle timer also runs from the wake
    if r.ready_at is not None and w.now - r.ready_at < max(cfg.min_stay, spec.scaling.stop_unused_after):
        return None
    return Sleep(r.id, cfg.level, f"unused for {idle:.0f}s; its GPUs are free until a request wakes it")


def can_sleep(w: World, by_id: Mapping[str, NodeRecord], current: Mapping[str, ReplicaRecord], spec: ModelSpec,
              r: ReplicaRecord) -> bool:
    """Its engine can sleep, it serves, on one node whose agent knows sleep and has room for one more sleeper."""
    cfg = spec.sleep
    if cfg is None or spec.pinned or spec.engine not in SLEEPS or len(r.assignments) != 1 or not r.ready:
        return False
    node = by_id.get(r.assignments[0].node_id)
    if node is None or node.lost or node.report.version < SERVING_WIRE_VERSION:
        return False  # an older agent would keep its engine awake while its GPUs were given to another
    if (node.id, spec.engine) in w.no_sleep:
        return False  # its engine refused sleep mode there: it runs without (control/nodes/sleep_refusals.py)
    share = int(node.report.hardware.mem_total_bytes * w.timings.sleep_host_share)
    held = host_held(spec, share) if cfg.level == 1 else 0
    # room in the node's share of host memory for one more sleeper's weights
    return not held or held + _held_asleep(w, current, node.id, share) <= share


def preempt_to_sleep(w: World, by_id: Mapping[str, NodeRecord], current: Mapping[str, ReplicaRecord],
                     do: Callable[[Preempt | Sleep], None]) -> Callable[[Preempt], None]:
    """Preemption's way for a victim to go: to sleep where it can (its GPUs free for the model that wants them, and
    it sleeps on under it), else drained and stopped."""
    def go(i: Preempt) -> None:
        r, spec = current.get(i.replica_id), None
        if r is not None:
            spec = w.models.get(r.model)
        if r is None or spec is None or spec.sleep is None or not can_sleep(w, by_id, current, spec, r):
            do(i)
            return
        do(Sleep(r.id, spec.sleep.level, f"preempted for {i.for_model} (priority {i.for_rank} over {i.rank}): "
                 "its GPUs are theirs while it sleeps", for_model=i.for_model))

    return go


def host_held(spec: ModelSpec, share: int) -> int:
    """What a replica of `spec` asleep at level 1 holds in host memory: its sleep block's host_memory, else its
    weights' size where the catalog knows it, else the node's whole share for sleepers (unknown: it sleeps alone)."""
    cfg = spec.sleep
    if cfg is not None and cfg.host_memory is not None:
        return int(cfg.host_memory)
    return int(spec.size) if spec.size else share


def _held_asleep(w: World, current: Mapping[str, ReplicaRecord], node_id: str, share: int) -> int:
    total = 0
    for r in current.values():
        spec = w.models.get(r.model)
        if r.sleep_level == 1 and spec is not None and spec.sleep is not None and r.node_ids() == [node_id]:
            total += host_held(spec, share)
    return total


def keep_asleep(w: World, spec: ModelSpec, sleepers: list[ReplicaRecord], awake: int, demanded: bool,
                held: Mapping[tuple[str, int], str]) -> list[Wake | Stop | Evict]:
    """For one model's sleepers: one woken when a request asks and no replica is awake (one whose GPUs another
    holds cannot wake: it stops, and the model loads where there is room); those asleep past stop_after (or whose
    model no longer sleeps) stopped. `held`: held_gpus()."""
    out: list[Wake | Stop | Evict] = []
    # the most recent sleeper with its GPUs free wakes first
    for r in sorted(sleepers, key=lambda r: (_holder(r, held) is not None, -(r.slept_at or 0.0), r.id)):
        cfg, asleep_for, by = spec.sleep, w.now - (r.slept_at or w.now), _holder(r, held)
        if demanded and not awake:
            out.append(Wake(r.id) if by is None else Evict(r.id, by))
            awake += by is None
        elif r.slept_for and by is None and not awake and cfg is not None and asleep_for >= cfg.min_stay \
                and _in_use_when_taken(w, spec, r):
            out.append(Wake(r.id))  # its room is free again, and it was serving when it was taken: back at wake cost
            awake += 1
        elif cfg is None:
            out.append(Stop(r.id, Reason.Idle, "its model no longer sleeps"))
        elif cfg.stop_after is not None and asleep_for >= cfg.stop_after:
            out.append(Stop(r.id, Reason.Idle, f"{asleep_for:.0f}s asleep"))
    return out


def _in_use_when_taken(w: World, spec: ModelSpec, r: ReplicaRecord) -> bool:
    """A sleeper put to sleep for another model's room that its users had not left: used within its model's
    stop_unused_after (an idle one would have been stopped by now had it stayed awake)."""
    used = w.last_used.get(r.id)
    return used is not None and w.now - used < spec.scaling.stop_unused_after


def woken_for_load(w: World, spec: ModelSpec, active: list[ReplicaRecord], current: Mapping[str, ReplicaRecord],
                   do: Callable[[Wake | Stop | Evict], None]) -> bool:
    """Scaling on load wants one more: a sleeper wakes rather than another loads (True). A sleeper counts among the
    model's replicas up to max, so unwoken it would hold the step up back; one whose GPUs another holds stops."""
    asleep = [r for r in active if r.sleep_level]
    out = keep_asleep(w, spec, asleep, 0, True, held_gpus(current)) if asleep else []
    for i in out:
        do(i)
    return any(isinstance(i, Wake) for i in out)


def held_gpus(current: Mapping[str, ReplicaRecord]) -> dict[tuple[str, int], str]:
    """(node, GPU) -> the model of the live, awake replica holding it, or of the replica not yet placed that a
    sleeper preempted for it still makes room for (the room is theirs: waking onto it would only be preempted again)."""
    held: dict[tuple[str, int], str] = {}
    waiting = {r.model for r in current.values() if not (r.placed or r.failed or r.stop is not None)}
    for r in current.values():
        if (not r.sleep_level or r.slept_for in waiting) and not r.failed and r.stop is None:
            for a in r.assignments:
                held.update({(a.node_id, g): r.slept_for if r.sleep_level else r.model for g in a.gpus})
    return held


def _holder(r: ReplicaRecord, held: Mapping[tuple[str, int], str]) -> str | None:
    return next((held[(a.node_id, g)] for a in r.assignments for g in a.gpus if (a.node_id, g) in held), None)


def while_asleep(r: ReplicaRecord, seen: Fail | Observe) -> Fail | Observe:
    """A sleeper's engine that still says it serves (the agent has not yet been told) is not ready: nothing may be
    routed to an engine about to sleep."""
    if r.sleep_level and isinstance(seen, Observe) and seen.status == Status.TRUE:
        return Observe(r.id, Status.FALSE, Reason.Sleeping, "told to sleep: its engine has not yet said so", "",
                       seen.seen_ranks)
    return seen


def taken(current: Mapping[str, ReplicaRecord]) -> list[Evict]:
    """Idle sleepers whose GPUs a live replica of another now holds: evicted for that replica's model. One put to
    sleep for another's room sleeps on under it (keep_asleep wakes it once its GPUs are free again)."""
    held = held_gpus(current)
    out = []
    for r in current.values():
        if r.sleep_level and r.stop is None and not r.failed and not r.slept_for:
            by = _holder(r, held)
            if by is not None:
                out.append(Evict(r.id, by))
    return out
