"""Properties every placement and refusal must have, over generated clusters.

The feasibility oracle here is written from the records, independently of checks.py and build_snapshot, so a
placement that breaks a rule, or a refusal when a valid placement exists, is caught rather than agreed with.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import llmgw
from llmgw.config.server import ModelSpec, Profile, Scaling
from llmgw.core.explanation import explanation_lines
from llmgw.core.reasons import Reason
from llmgw.placement import checks
from llmgw.placement.checks import CHECKS, Request, feasible, prepared
from llmgw.placement.place import VERDICTS_PER_REASON, Placement, Refusal, _rank, _score, place, reservations
from llmgw.placement.snapshot import Snapshot, build_snapshot
from llmgw.reconcile.transitions import failed
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment
from llmgw.wire.messages import GPU, EngineStatus, Fabric, Hardware, NodeReport, ShardState
from tests.tiers import examples

GiB = 2**30
CLASSES = ("H100-80G", "A100-40G", "L40S-45G")
FABRICS = ("ib-a", "ib-b", "ib-c")
ENGINES = ("sim", "llamacpp")
PORT_LOW = 20000
NOW = 1_800_000_000.0
SOURCE = "/models/m"

# models that existing replicas belong to; "gone" is deliberately absent from the catalog
OTHER = ModelSpec(name="other", source="/models/other", engine="sim",
                  profile=Profile(gpus_per_shard=1, memory=64 * GiB), scaling=Scaling(min=1, max=4))
# 150 cases per property in `make test`, fewer in `make check`'s unit tier (tests/tiers.py)
SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Cluster:
    nodes: list[NodeRecord]
    replicas: list[ReplicaRecord]
    models: dict[str, ModelSpec]


# ---------------------------------------------------------------- generation


def _failed_if(yes: bool, r: ReplicaRecord) -> ReplicaRecord:
    return failed(r, Reason.ShardFailed, "drawn failed", 0.0) if yes else r


@st.composite
def node_records(draw: st.DrawFn, i: int, uniform: bool) -> NodeRecord:
    nid = f"node{i:02d}"
    n_gpus = 8 if uniform and draw(st.integers(0, 4)) else draw(st.integers(0, 8))
    cls = CLASSES[0] if uniform else draw(st.sampled_from(CLASSES))
    mixed = not uniform and n_gpus > 1 and draw(st.integers(0, 5)) == 0
    classes = [draw(st.sampled_from(CLASSES)) if mixed else cls for _ in range(n_gpus)]
    faulty: set[int] = set()
    if n_gpus and draw(st.booleans()):
        faulty = draw(st.sets(st.integers(0, n_gpus - 1), min_size=1, max_size=3))
    mode = draw(st.sampled_from(("all", "pairs", "none", "unknown", "random")))
    cards = []
    for g in range(n_gpus):
        if mode == "all":
            peers: list[int] | None = [j for j in range(n_gpus) if j != g]
        elif mode == "pairs":
            peers = [g ^ 1] if g ^ 1 < n_gpus else []
        elif mode == "none":
            peers = []
        elif mode == "unknown":
            peers = None
        else:
            peers = sorted(draw(st.sets(st.integers(0, n_gpus - 1), max_size=n_gpus)) - {g})
        cards.append(GPU(index=g, name=classes[g], gpu_class=classes[g], memory_mib=81559, faulty=g in faulty,
                         fault="Xid 79: GPU has fallen off the bus" if g in faulty else "", nvlink_peers=peers))
    fabrics = draw(st.lists(st.sampled_from(FABRICS), unique=True, min_size=int(uniform), max_size=3))
    probed = draw(st.integers(0, 9)) > 0
    engines = []
    if probed:
        names = ENGINES if uniform or draw(st.booleans()) else draw(st.lists(st.sampled_from(ENGINES), unique=True))
        for name in names:
            runs = draw(st.integers(0, 7)) > 0
            engines.append(EngineStatus(name=name, version="1", runs=runs, message="" if runs else "libgomp.so.1"))
    span = draw(st.sampled_from((0, 1, 2, 3, 999, 999)))
    port_high = PORT_LOW + span
    # shards the node still reports but nothing placed (an agent stopping them); their ports stay taken
    stray = [
        ShardState(replica_id=f"stray-{nid}-{k}", rank=0, state="exited", endpoint=f"http://h:{port}")
        for k, port in enumerate(sorted(draw(st.sets(st.integers(PORT_LOW - 3, port_high + 3), max_size=2))))
    ]
    report = NodeReport(
        node_id=nid, address=f"10.0.{i // 250}.{i % 250 + 1}",
        hardware=Hardware(mem_total_bytes=draw(st.sampled_from((512, 128, 96, 16))) * GiB, gpus=cards),
        engines_probed=probed, engines=engines,
        fabrics=[Fabric(name=f, adapters=[f"mlx5_{k}" for k in range(2)], rate_gbps=400.0) for f in fabrics],
        weights=[SOURCE] if draw(st.integers(0, 2)) == 0 else [],
        port_low=PORT_LOW, port_high=port_high, shards=stray,
    )
    lost = draw(st.integers(0, 7)) == 0
    return NodeRecord(id=nid, report=report, first_seen=0.0, last_seen=NOW - (120 if lost else 1), lost=lost)


def _free_ports(rec: NodeRecord, taken: set[int], k: int) -> list[int]:
    return [p for p in range(rec.report.port_low, rec.report.port_high + 1) if p not in taken][:k]


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 30, uniform: bool | None = None) -> Cluster:
    """uniform: mostly 8-card nodes of one class on at least one fabric, where multi-node placements are possible."""
    if uniform is None:
        uniform = draw(st.booleans())
    count = draw(st.integers(1, max_nodes))
    nodes = [draw(node_records(i, uniform)) for i in range(count)]
    replicas: list[ReplicaRecord] = []
    gpus_taken: dict[str, set[int]] = {n.id: set() for n in nodes}
    ports_taken: dict[str, set[int]] = {
        n.id: {int(s.endpoint.rsplit(":", 1)[-1]) for s in n.report.shards} for n in nodes
    }
    busy: set[str] = set()

    def take(rec: NodeRecord) -> list[int]:
        free = [g.index for g in rec.report.hardware.gpus if g.index not in gpus_taken[rec.id]]
        picked = sorted(draw(st.sets(st.sampled_from(free), max_size=len(free)))) if free else []
        gpus_taken[rec.id].update(picked)
        return picked

    # multi-node replicas hold whole nodes
    order = draw(st.permutations(range(count)))
    pos = 0
    for _ in range(draw(st.integers(0, 3))):
        size = draw(st.integers(2, 3))
        if pos + size > count:
            break
        group = [nodes[j] for j in order[pos : pos + size]]
        pos += size
        rid = f"multi-{len(replicas)}"
        assigns = []
        for rank, rec in enumerate(group):
            ports = _free_ports(rec, ports_taken[rec.id], 2) if rank == 0 else []
            ports_taken[rec.id].update(ports)
            assigns.append(ShardAssignment(
                rank=rank, node_id=rec.id, address=rec.report.address, gpus=take(rec),
                serve_port=ports[0] if ports else None, rendezvous_port=ports[1] if len(ports) > 1 else None,
            ))
            busy.add(rec.id)
        name = draw(st.sampled_from(("other", "gone")))
        replicas.append(_failed_if(draw(st.booleans()), ReplicaRecord(
            id=rid, model=name, created_at=0.0, shards_expected=size, assignments=assigns)))
    # single-node replicas on some of the rest
    for rec in nodes:
        if rec.id in busy:
            continue
        for _ in range(draw(st.sampled_from((0, 1, 1, 2)))):
            ports = _free_ports(rec, ports_taken[rec.id], 1)
            ports_taken[rec.id].update(ports)
            name = draw(st.sampled_from(("other", "other", "gone")))
            replicas.append(_failed_if(draw(st.integers(0, 5)) == 0, ReplicaRecord(
                id=f"single-{len(replicas)}", model=name, created_at=0.0, shards_expected=1,
                assignments=[ShardAssignment(rank=0, node_id=rec.id, address=rec.report.address, gpus=take(rec),
                                             serve_port=ports[0] if ports else None)],
            )))
    return Cluster(nodes=nodes, replicas=replicas, models={"other": OTHER})


@st.composite
def models(draw: st.DrawFn, name: str = "m", min_nodes: int = 1) -> ModelSpec:
    return ModelSpec(
        name=name, source=SOURCE, engine=draw(st.sampled_from(ENGINES)),
        profile=Profile(
            gpus_per_shard=draw(st.integers(0, 8)), nodes=draw(st.integers(min_nodes, 4)),
            gpu_class=draw(st.sampled_from((CLASSES[0], CLASSES[0], None, *CLASSES[1:]))),
            memory=draw(st.sampled_from((0, 0, 8 * GiB, 48 * GiB, 100 * GiB))),
        ),
        scaling=Scaling(min=1, max=1),
    )


# ---------------------------------------------------------------- oracle


def _on_node(node_id: str, replicas: list[ReplicaRecord]) -> list[tuple[ReplicaRecord, ShardAssignment]]:
    return [(r, a) for r in replicas for a in r.assignments if a.node_id == node_id]


def _used_ports(rec: NodeRecord, replicas: list[ReplicaRecord]) -> set[int]:
    out = {p for _, a in _on_node(rec.id, replicas) for p in (a.serve_port, a.rendezvous_port) if p}
    out |= {int(s.endpoint.rsplit(":", 1)[-1]) for s in rec.report.shards if s.endpoint}
    return out


def _free_cards(rec: NodeRecord, replicas: list[ReplicaRecord], cls: str | None) -> list[GPU]:
    used = {g for _, a in _on_node(rec.id, replicas) for g in a.gpus}
    return [g for g in rec.report.hardware.gpus
            if not g.faulty and g.index not in used and (cls is None or g.gpu_class == cls)]


def fits(rec: NodeRecord, replicas: list[ReplicaRecord], catalog: dict[str, ModelSpec], m: ModelSpec) -> bool:
    """Can this node take one shard of m? Written from the rules, not from checks.py."""
    rep, p = rec.report, m.profile
    if rec.lost or not rep.engines_probed:
        return False
    if not any(e.name == m.engine and e.runs for e in rep.engines):
        return False
    here = _on_node(rec.id, replicas)
    if any(len(r.assignments) > 1 for r, _ in here):
        return False  # held whole by a multi-node replica
    if p.nodes > 1 and (here or not rep.fabrics):
        return False
    if p.gpus_per_shard and len(_free_cards(rec, replicas, p.gpu_class)) < p.gpus_per_shard:
        return False
    reserved = sum(catalog[r.model].profile.memory for r, _ in here if r.model in catalog)
    if p.memory and rep.hardware.mem_total_bytes - reserved < p.memory:
        return False
    used = _used_ports(rec, replicas)
    free_ports = [q for q in range(rep.port_low, rep.port_high + 1) if q not in used]
    return len(free_ports) >= 2  # rank 0 may need a serve and a rendezvous port


def placeable(c: Cluster, m: ModelSpec) -> bool:
    ok = [n for n in c.nodes if fits(n, c.replicas, c.models, m)]
    if m.profile.nodes == 1:
        return bool(ok)
    return any(sum(1 for n in ok if f in {x.name for x in n.report.fabrics}) >= m.profile.nodes for f in FABRICS)


# ---------------------------------------------------------------- assertions


def check_placement(res: Placement, c: Cluster, m: ModelSpec, snap: Snapshot) -> None:
    p = m.profile
    recs = {n.id: n for n in c.nodes}
    a = res.assignments
    assert len(a) == p.nodes
    assert [x.rank for x in a] == list(range(p.nodes))
    assert len({x.node_id for x in a}) == p.nodes, "a node appears twice in one replica"
    for x in a:
        rec = recs[x.node_id]
        assert not rec.lost, f"placed on lost node {rec.id}"
        assert fits(rec, c.replicas, c.models, m), f"{rec.id} cannot take a shard of {p}"
        assert x.address == rec.report.address
        assert len(x.gpus) == p.gpus_per_shard == len(set(x.gpus))
        cards = {g.index: g for g in rec.report.hardware.gpus}
        used = {g for _, b in _on_node(rec.id, c.replicas) for g in b.gpus}
        for g in x.gpus:
            assert g in cards, f"card {g} does not exist on {rec.id}"
            assert not cards[g].faulty, f"faulty card {g} on {rec.id}"
            assert g not in used, f"card {g} on {rec.id} is already used"
            if p.gpu_class is not None:
                assert cards[g].gpu_class == p.gpu_class
        ports = [q for q in (x.serve_port, x.rendezvous_port) if q is not None]
        assert len(set(ports)) == len(ports)
        for q in ports:
            assert rec.report.port_low <= q <= rec.report.port_high
            assert q not in _used_ports(rec, c.replicas), f"port {q} on {rec.id} is taken"
    assert a[0].serve_port is not None
    assert all(x.serve_port is None and x.rendezvous_port is None for x in a[1:])
    if p.nodes == 1:
        assert a[0].fabric is None and a[0].rendezvous_port is None
        if any(SOURCE in n.report.weights for n in c.nodes if fits(n, c.replicas, c.models, m)):
            assert SOURCE in recs[a[0].node_id].report.weights, "a node holding the weights was passed over"
    else:
        assert a[0].rendezvous_port is not None
        fabrics = {x.fabric for x in a}
        assert len(fabrics) == 1 and None not in fabrics, f"spans fabrics {fabrics}"
        f = fabrics.pop()
        for x in a:
            advertised = {fb.name: fb for fb in recs[x.node_id].report.fabrics}
            assert f in advertised, f"{x.node_id} is not on {f}"
            assert x.fabric_adapters == advertised[f].adapters
            assert not _on_node(x.node_id, c.replicas), f"{x.node_id} is not whole"
    e = res.explanation
    assert e.placed and e.chosen is not None and e.chosen.nodes == [x.node_id for x in a]
    assert e.nodes_evaluated == len(c.nodes)
    assert sum(e.filtered.values()) <= e.nodes_evaluated


def check_refusal(res: Refusal, c: Cluster, m: ModelSpec) -> None:
    e = res.explanation
    assert not e.placed and e.chosen is None
    assert e.nodes_evaluated == len(c.nodes)
    total = sum(e.filtered.values())
    assert total <= e.nodes_evaluated
    assert all(v > 0 for v in e.filtered.values())
    if m.profile.nodes == 1:
        assert total == e.nodes_evaluated, "a node was refused without a reason"
    recs = {n.id: n for n in c.nodes}
    per_reason = Counter(v.reason for v in e.verdicts)
    for reason, shown in per_reason.items():
        assert reason in e.filtered
        assert shown <= min(VERDICTS_PER_REASON, e.filtered[reason])
    for v in e.verdicts:
        assert not fits(recs[v.node_id], c.replicas, c.models, m), f"{v.node_id} refused ({v.reason}) but fits"
        assert v.message
    assert explanation_lines(e)[0].startswith(f"{m.name}: not placed")


def check_checks(res: Placement | Refusal, snap: Snapshot, c: Cluster, m: ModelSpec) -> None:
    """Each check is defined once; every way of asking it must give the same answer, node by node.

    A node's verdict is the first check whose fits() is False, with that check's reason and explain() words;
    the prepared test place() runs says what fits() says; the independent oracle agrees on which nodes fit;
    and place() counts, per reason, exactly the nodes that verdict names, and shows the first few of each in
    node order with the same words.
    """
    req = Request("r-new", m)
    tests = {id(check): test for check, test in prepared(req)}
    recs = {n.id: n for n in c.nodes}
    counts: Counter[Reason] = Counter()
    shown: list[tuple[str, Reason, str]] = []
    for n in snap.nodes:
        fit = [check.fits(n, req) for check in CHECKS]
        for check, ok in zip(CHECKS, fit, strict=True):
            test = tests.get(id(check))
            assert ok == (test is None or bool(test(n))), f"{n.id}: {type(check).__name__} prepared disagrees"
        v = feasible(n, req)
        if all(fit):
            assert v is None, f"{n.id}: every check fits, yet {v}"
        else:
            failed = CHECKS[fit.index(False)]
            assert v == (failed.reason, failed.explain(n, req)), f"{n.id}: {type(failed).__name__} fails, yet {v}"
            assert v[1], f"{n.id}: {v[0]} without words"
            counts[v[0]] += 1
            if counts[v[0]] <= VERDICTS_PER_REASON:
                shown.append((n.id, v[0], v[1]))
        assert (v is None) == fits(recs[n.id], c.replicas, c.models, m), f"{n.id}: {v}; the oracle disagrees"
    e = res.explanation
    filtered = {k: x for k, x in e.filtered.items() if k != Reason.FabricTooSmall}  # counted after the checks
    assert list(filtered.items()) == list(counts.items()), "place() counted other nodes, or in another order"
    assert [(v.node_id, v.reason, v.message) for v in e.verdicts] == shown


def check_fast_paths(res: Placement | Refusal, snap: Snapshot, m: ModelSpec,
                     failed_on: frozenset[str] = frozenset()) -> None:
    """The best nodes are found without scoring every node; that must give what scoring every node gives."""
    req = Request("r-new", m, failed_on)
    ok = [n for n in snap.nodes if feasible(n, req) is None]
    need = m.profile.nodes
    if need == 1:
        expect = [min((_score(n, req) for n in ok), key=_rank)] if ok else []
    else:
        best: tuple[float, str, list[Any]] | None = None
        for f in sorted({f for n in ok for f in n.fabrics}):
            members = [n for n in ok if f in n.fabrics]
            if len(members) >= need:
                picked = sorted((_score(n, req) for n in members), key=_rank)[:need]
                cand = (-sum(s.total for s in picked), f, picked)
                best = cand if best is None or cand[:2] < best[:2] else best
        expect = best[2] if best else []
    assert isinstance(res, Placement) == bool(expect)
    if isinstance(res, Placement):
        assert [a.node_id for a in res.assignments] == [s.node.id for s in expect]
        assert [a.gpus for a in res.assignments] == [s.gpus for s in expect]
        assert res.explanation.chosen is not None
        assert res.explanation.chosen.total == sum(s.total for s in expect)


def _place(c: Cluster, m: ModelSpec, nodes: list[NodeRecord] | None = None,
           replicas: list[ReplicaRecord] | None = None) -> tuple[Placement | Refusal, Snapshot]:
    catalog = {**c.models, m.name: m}
    snap = build_snapshot(nodes if nodes is not None else c.nodes,
                          replicas if replicas is not None else c.replicas, catalog, NOW)
    return place(Request("r-new", m), snap), snap


# ---------------------------------------------------------------- properties


@SETTINGS
@given(c=clusters(), m=models())
def test_placement_obeys_every_rule_and_refuses_only_when_nothing_fits(c: Cluster, m: ModelSpec) -> None:
    res, snap = _place(c, m)
    event(f"{'placed' if isinstance(res, Placement) else 'refused'} {'multi' if m.profile.nodes > 1 else 'single'}")
    assert isinstance(res, Placement) == placeable(c, m), (
        f"placement {'found' if isinstance(res, Placement) else 'refused'}; oracle disagrees: "
        + " | ".join(explanation_lines(res.explanation))
    )
    if isinstance(res, Placement):
        check_placement(res, c, m, snap)
    else:
        check_refusal(res, c, m)
    check_checks(res, snap, c, m)
    check_fast_paths(res, snap, m)


@SETTINGS
@given(c=clusters(), m=models(), data=st.data())
def test_nodes_a_replica_failed_on_are_avoided_not_filtered(c: Cluster, m: ModelSpec, data: st.DataObject) -> None:
    """A failed replica's nodes score lower for its model's next replica: elsewhere when anywhere else fits, and
    still placed when nothing else does (a preference never refuses); found as fast as without it."""
    failed_on = frozenset(data.draw(st.sets(st.sampled_from([n.id for n in c.nodes]))) if c.nodes else set())
    snap = build_snapshot(c.nodes, c.replicas, {**c.models, m.name: m}, NOW)
    res = place(Request("r-new", m, failed_on), snap)
    assert isinstance(res, Placement) == placeable(c, m)
    check_fast_paths(res, snap, m, failed_on)
    if isinstance(res, Placement) and m.profile.nodes == 1:
        others = [n for n in snap.nodes if n.id not in failed_on and feasible(n, Request("r-new", m)) is None]
        if others:
            assert res.assignments[0].node_id not in failed_on, "placed where it failed with another node free"


@SETTINGS
@given(c=clusters(uniform=True), m=models(min_nodes=2))
def test_multi_node_placement_obeys_every_rule(c: Cluster, m: ModelSpec) -> None:
    res, snap = _place(c, m)
    event("placed" if isinstance(res, Placement) else "refused")
    assert isinstance(res, Placement) == placeable(c, m), " | ".join(explanation_lines(res.explanation))
    if isinstance(res, Placement):
        check_placement(res, c, m, snap)
    else:
        check_refusal(res, c, m)
    check_checks(res, snap, c, m)
    check_fast_paths(res, snap, m)


@SETTINGS
@given(c=clusters(), m=models(), data=st.data())
def test_same_input_same_answer_whatever_the_order(c: Cluster, m: ModelSpec, data: st.DataObject) -> None:
    first, _ = _place(c, m)
    again, _ = _place(c, m)
    assert first == again
    nodes = data.draw(st.permutations(c.nodes))
    replicas = data.draw(st.permutations(c.replicas))
    shuffled, _ = _place(c, m, nodes, replicas)
    assert shuffled == first


@SETTINGS
@given(c=clusters(), m=models(), data=st.data())
def test_gpu_and_fabric_report_order_does_not_change_the_answer(c: Cluster, m: ModelSpec, data: st.DataObject) -> None:
    first, _ = _place(c, m)
    nodes = []
    for n in c.nodes:
        hw = n.report.hardware
        gpus = data.draw(st.permutations(hw.gpus))
        fabrics = data.draw(st.permutations(n.report.fabrics))
        report = n.report.model_copy(update={"hardware": hw.model_copy(update={"gpus": gpus}), "fabrics": fabrics})
        nodes.append(n.model_copy(update={"report": report}))
    shuffled, _ = _place(c, m, nodes)
    assert shuffled == first


@SETTINGS
@given(c=clusters(), ms=st.lists(st.tuples(models(), st.integers(1, 4)), min_size=1, max_size=4))
def test_placing_in_turn_with_reservations_never_double_books(c: Cluster, ms: list[tuple[ModelSpec, int]]) -> None:
    # several replicas of one model in one pass is the common case: min 3 on a fresh cluster
    catalog = dict(c.models)
    distinct = [m.model_copy(update={"name": f"m{i}"}) for i, (m, _) in enumerate(ms)]
    catalog.update({m.name: m for m in distinct})
    specs = [m for m, (_, times) in zip(distinct, ms, strict=True) for _ in range(times)]
    snap = build_snapshot(c.nodes, c.replicas, catalog, NOW)
    placed: list[ReplicaRecord] = []
    for i, m in enumerate(specs):
        rid = f"new-{i}"
        req = Request(rid, m)
        res = place(req, snap)
        world = Cluster(c.nodes, c.replicas + placed, catalog)
        assert isinstance(res, Placement) == placeable(world, m)
        if isinstance(res, Refusal):
            continue
        check_placement(res, world, m, snap)
        check_checks(res, snap, world, m)
        check_fast_paths(res, snap, m)
        placed.append(ReplicaRecord(id=rid, model=m.name, created_at=NOW, shards_expected=m.profile.nodes,
                                    assignments=res.assignments))
        snap = snap.with_reservation(rid, reservations(req, res.assignments))
        # the copy-on-write snapshot must say what a snapshot built from scratch says
        assert snap == build_snapshot(c.nodes, c.replicas + placed, catalog, NOW)

    gpus: Counter[tuple[str, int]] = Counter()
    ports: Counter[tuple[str, int]] = Counter()
    holders: dict[str, set[str]] = {}
    for r in c.replicas + placed:
        for a in r.assignments:
            gpus.update((a.node_id, g) for g in a.gpus)
            ports.update((a.node_id, q) for q in (a.serve_port, a.rendezvous_port) if q)
            holders.setdefault(a.node_id, set()).add(r.id)
    for n in c.nodes:
        ports.update((n.id, int(s.endpoint.rsplit(":", 1)[-1])) for s in n.report.shards if s.endpoint)
    assert [k for k, v in gpus.items() if v > 1] == []
    assert [k for k, v in ports.items() if v > 1] == []
    for r in placed:
        if len(r.assignments) > 1:
            for a in r.assignments:
                assert holders[a.node_id] == {r.id}, f"{a.node_id} is shared by a multi-node replica"


def test_each_check_has_one_constant_reason_and_no_second_copy_exists() -> None:
    # a class attribute, not a property or a per-instance value: the same whatever the node or the request
    reasons = [vars(type(check))["reason"] for check in CHECKS]
    assert all(isinstance(x, Reason) for x in reasons)
    assert all("reason" not in vars(check) for check in CHECKS)
    assert reasons == [
        Reason.NodeNotReady, Reason.AgentTooOld, Reason.EngineNotProbed, Reason.EngineMissing, Reason.EngineInstalling,
        Reason.EngineCannotRun, Reason.NoGPUBuild,
        Reason.GPUClassMismatch, Reason.NodeNotWhole, Reason.InsufficientGPUs, Reason.InsufficientMemory,
        Reason.NoFabric, Reason.NoFreePort,
    ]
    assert len(set(reasons)) == len(reasons)  # place() counts each check's failures under its reason
    assert not hasattr(checks, "fast_reason")
    for path in Path(llmgw.__file__).parent.rglob("*.py"):
        defined = {d.name for d in ast.walk(ast.parse(path.read_text())) if isinstance(d, ast.FunctionDef)}
        assert "fast_reason" not in defined, f"{path} keeps a second copy of the checks"
