"""Who fetches a file from its origin and who copies it from whom: one download per fabric."""

from __future__ import annotations

from llmgw.config.server import ModelSpec
from llmgw.control.nodes.weights import Leaders, plans_for
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment
from llmgw.wire.messages import FetchStatus, WeightsPlan
from tests.clusters import model, node

URL = "https://models.example/m.gguf"
DIGEST = "ab" * 32


def m() -> ModelSpec:
    return model(source=URL, gpus_per_shard=0, cls=None).model_copy(update={"sha256": DIGEST, "size": 1000})


def rec(node_id: str, fabric: str | None = "ib-a", holds: bool = False, fetching: str = "", port: int = 7480,
        lost: bool = False) -> NodeRecord:
    n = node(node_id, fabric=fabric, weights=(URL,) if holds else (), lost=lost)
    fetches = [FetchStatus(source=URL, state="failed" if fetching == "failed" else "fetching", via=fetching)
               ] if fetching else []
    return n.model_copy(update={"report": n.report.model_copy(update={"fetches": fetches, "peer_port": port})})


def replicas(*node_ids: str) -> list[ReplicaRecord]:
    return [ReplicaRecord(id=f"m-{i}", model="m", shards_expected=1, created_at=0.0, assignments=[
        ShardAssignment(node_id=n, address="10.0.0.1", rank=0, gpus=[])]) for i, n in enumerate(node_ids)]


def plans(nodes: list[NodeRecord], wanting: list[str], leaders: Leaders | None = None) -> dict[str, WeightsPlan]:
    by_id = {n.id: n for n in nodes}
    out = {}
    for n in wanting:
        got, chosen = plans_for(n, by_id, replicas(*wanting), {"m": m()}, leaders)
        if leaders is not None:
            leaders.update(chosen)
        out[n] = got[URL]
    return out


def test_when_nobody_holds_it_the_first_node_fetches_and_the_others_wait_for_it() -> None:
    p = plans([rec("n1"), rec("n2"), rec("n3"), rec("n4")], ["n4", "n2", "n3"])
    assert p["n2"] == WeightsPlan(sha256=DIGEST, size=1000), "n1 wants nothing: n2 is the first that does"
    assert {n: (x.origin, x.wait_for) for n, x in p.items() if n != "n2"} == {"n3": (False, "n2"),
                                                                             "n4": (False, "n2")}


def test_holders_of_the_fabric_are_the_peers_and_the_origin_the_fallback() -> None:
    nodes = [rec("n1", holds=True), rec("n2", holds=True), rec("n3"), rec("n4", fabric="ib-b", holds=True),
             rec("n5", holds=True, port=0), rec("n6", holds=True, lost=True)]
    p = plans(nodes, ["n3"])["n3"]
    assert {x.node_id for x in p.peers} == {"n1", "n2"}, "same fabric, serving, live"
    assert p.origin and not p.wait_for and p.sha256 == DIGEST


def test_copies_spread_over_the_holders() -> None:
    nodes = [rec("h1", holds=True), rec("h2", holds=True)] + [rec(f"c{i}") for i in range(20)]
    firsts = {plans(nodes, [f"c{i}"])[f"c{i}"].peers[0].node_id for i in range(20)}
    assert firsts == {"h1", "h2"}


def test_a_node_already_fetching_from_the_origin_keeps_the_role() -> None:
    p = plans([rec("n1"), rec("n2", fetching="origin"), rec("n3")], ["n1", "n2", "n3"])
    assert p["n2"].origin and p["n1"].wait_for == "n2" and p["n3"].wait_for == "n2"


def test_a_node_that_failed_to_fetch_it_or_cannot_serve_does_not_lead() -> None:
    p = plans([rec("n1", fetching="failed"), rec("n2", port=0), rec("n3")], ["n1", "n2", "n3"])
    assert p["n3"].origin and p["n1"].wait_for == "n3" and p["n2"].wait_for == "n3"


def test_a_node_without_a_fabric_fetches_for_itself() -> None:
    p = plans([rec("n1", fabric=None), rec("n2", fabric=None, holds=True)], ["n1"])
    assert p["n1"] == WeightsPlan(sha256=DIGEST, size=1000)


def test_sources_that_are_not_urls_get_no_plan() -> None:
    local = model(source="/models/m", gpus_per_shard=0, cls=None)
    assert plans_for("n1", {"n1": rec("n1")}, replicas("n1"), {"m": local}) == ({}, {})


def test_the_node_chosen_to_fetch_stays_chosen_as_others_join() -> None:
    """n2's replica is placed first and n2 is told to fetch; n1, placed later, sorts first by name but must wait
    for n2 rather than download a second copy before n2 has reported that it is fetching."""
    leaders: Leaders = {}
    nodes = [rec("n1"), rec("n2"), rec("n3")]
    assert plans(nodes, ["n2"], leaders)["n2"].origin and leaders == {("ib-a", URL): "n2"}
    later = plans(nodes, ["n2", "n1", "n3"], leaders)
    assert later["n1"].wait_for == "n2" and later["n3"].wait_for == "n2" and later["n2"].origin


def test_a_chosen_node_that_fails_gives_the_role_to_another() -> None:
    leaders: Leaders = {("ib-a", URL): "n2"}
    p = plans([rec("n1"), rec("n2", fetching="failed"), rec("n3")], ["n1", "n2", "n3"], leaders)
    assert p["n1"].origin and p["n3"].wait_for == "n1" and p["n2"].wait_for == "n1"
