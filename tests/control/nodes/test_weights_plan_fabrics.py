"""Weights plans across fabrics: who fetches from the origin, what the plane remembers, what placement believes of
peer copies."""

from __future__ import annotations

from pathlib import Path

from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.nodes.weights import Leaders, plans_for
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.placement import scores
from llmgw.placement.checks import Request
from llmgw.placement.snapshot import build_snapshot
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import Fabric, Hardware, NodeReport
from tests.control.nodes.test_weights_plan import URL, m, rec, replicas


def in_fabrics(n: NodeRecord, *names: str) -> NodeRecord:
    fabrics = [Fabric(name=f, adapters=["mlx5_0"], rate_gbps=400.0) for f in names]
    return n.model_copy(update={"report": n.report.model_copy(update={"fabrics": fabrics})})


def test_a_node_in_two_fabrics_does_not_become_a_second_origin_fetcher() -> None:
    """n1 (ib-y) is told to fetch from the origin; before it reports doing so, n3 (ib-x) picks n2 for ib-x; then
    n2 (ib-x and ib-y) reads ib-x's choice first (itself) and is told to fetch from the origin too: n1 and n2
    share ib-y, and both download the file."""
    nodes = {"n1": in_fabrics(rec("n1"), "ib-y"), "n2": in_fabrics(rec("n2"), "ib-x", "ib-y"),
             "n3": in_fabrics(rec("n3"), "ib-x")}
    wanting = replicas("n1", "n2", "n3")
    leaders: Leaders = {}
    told = {}
    for n in ("n1", "n3", "n2"):
        got, chosen = plans_for(n, nodes, wanting, {"m": m()}, leaders)
        leaders.update(chosen)
        told[n] = got[URL]
    from_origin = sorted(n for n, p in told.items() if p.origin and not p.peers and not p.wait_for)
    assert not {"n1", "n2"} <= set(from_origin), f"n1 and n2 share ib-y and are both told the origin: {told}"


def test_no_node_waits_for_one_that_can_never_serve_it() -> None:
    """n1 serves no weights (peer_port 0) and is downloading the file for itself. n2 is told to wait for n1 to
    copy from it: it never can (a holder without a port is no peer), so n2 waits the whole download out and then
    downloads it again."""
    nodes = {"n1": rec("n1", fetching="origin", port=0), "n2": rec("n2")}
    got, _ = plans_for("n2", nodes, replicas("n1", "n2"), {"m": m()}, {})
    assert not got[URL].wait_for, f"n2 waits for n1, which cannot serve: {got[URL]}"


def plane(tmp_path: Path, *placed_on: str) -> ControlPlane:
    """A control plane loaded from a store holding one replica of m on each node named."""
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[m()])
    store = SqliteStore(tmp_path / "s.db").open()
    for i, n in enumerate(placed_on):
        store.put_replica(ReplicaRecord(id=f"m-{i}", model="m", shards_expected=1, created_at=0.0, assignments=[
            ShardAssignment(node_id=n, address="127.0.0.1", rank=0, gpus=[])]))
    cp = ControlPlane(cfg, store, FakeClock())
    cp.load()
    return cp


def report(node_id: str, fabrics: list[str], holds: bool = False) -> NodeReport:
    return NodeReport(node_id=node_id, address="127.0.0.1", hardware=Hardware(), peer_port=7480,
                      fabrics=[Fabric(name=f, adapters=["mlx5_0"], rate_gbps=400.0) for f in fabrics],
                      weights=[URL] if holds else [])


def test_fetch_leaders_does_not_grow_with_every_fabric_name_ever_reported(tmp_path: Path) -> None:
    """Entries are added per (fabric, source) and never removed: a node whose fabric names change (an edited
    agent.yaml, a node that makes them up) grows the plane's memory at 16 entries per heartbeat, forever."""
    p = plane(tmp_path, "n1")
    for i in range(200):
        p.heartbeats.heartbeat(report("n1", [f"ib-{i}-{j}" for j in range(16)]))
    leaders = p.heartbeats.fetch_leaders.leaders
    assert len(leaders) <= 16, f"{len(leaders)} leaders remembered for one node and one file"


async def test_a_revoked_certificate_is_not_offered_as_a_peer(tmp_path: Path) -> None:
    """node03's certificate (serial abc123) is revoked: its heartbeats are refused from now on, but its record
    stays live until node_lost_after, and the plane keeps sending node01 to copy the file from it (the copier
    does not consult the revocation list for the server it copies from)."""
    p = plane(tmp_path, "node01")
    p.heartbeats.heartbeat(report("node03", ["ib-a"], holds=True), serial="abc123")
    await p.revoke("node03", "abc123", "key leaked")
    desired = p.heartbeats.heartbeat(report("node01", ["ib-a"]), serial="def456")
    plan = desired.shards[0].weights
    assert plan is not None
    assert "node03" not in {x.node_id for x in plan.peers}, f"the revoked certificate's node is a peer: {plan}"


def test_placement_counts_no_peer_copy_from_a_holder_that_cannot_serve() -> None:
    """build_snapshot credits a fabric with every file its live nodes hold, peer_port or not; plans_for only
    copies from holders that serve. A holder with peer_port 0 makes its fabric's nodes score FABRIC_COPY for a
    copy that will never happen (they download from the origin)."""
    holder = rec("h1", holds=True, port=0)
    other = rec("n2")
    snap = build_snapshot([holder, other], [], {"m": m()}, 0.0)
    n2 = snap.node("n2")
    assert n2 is not None
    got, _ = plans_for("n2", {"h1": holder, "n2": other}, replicas("n2"), {"m": m()}, {})
    assert not got[URL].peers, "precondition: no peer to copy from"
    assert scores.weights_present(n2, Request(replica_id="m-9", model=m())) == 0.0, \
        "scored as a peer copy that plans_for will not make"


def test_when_every_node_has_failed_once_they_do_not_all_go_to_the_origin() -> None:
    """Leaders that fail are passed over one by one; once each node of the fabric has failed (an origin outage
    longer than a few attempts), no node is eligible, leader is None and every node gets the bare plan: all of
    them download from the origin at once when their cool-downs end, and again every minute while it fails."""
    nodes = {n: rec(n, fetching="failed") for n in ("n1", "n2", "n3", "n4")}
    by_origin = []
    for n in nodes:
        got, _ = plans_for(n, nodes, replicas(*nodes), {"m": m()}, {})
        if got[URL].origin and not got[URL].peers and not got[URL].wait_for:
            by_origin.append(n)
    assert len(by_origin) <= 1, f"told to fetch from the origin at once: {by_origin}"
