"""Only a replica's own nodes keep it from being reaped, and replica ids (and secrets) cannot be guessed."""

from __future__ import annotations

import hashlib

from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Add, Reap
from llmgw.reconcile.reconcile import reconcile
from llmgw.reconcile.transitions import added, failed
from llmgw.reconcile.world import World
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment
from llmgw.wire.messages import ShardState
from tests.clusters import model, node

T = 1_800_000_000.0


def failed_on(node_id: str) -> ReplicaRecord:
    r = ReplicaRecord(id="m-0001", model="m", created_at=T, shards_expected=1,
                      assignments=[ShardAssignment(rank=0, node_id=node_id, address="10.0.0.1", gpus=[0])])
    return failed(r, Reason.ShardFailed, "", 0.0)


def world(nodes: list[NodeRecord], replicas: list[ReplicaRecord]) -> World:
    return World(now=T, started_at=T, models={"m": model("m", min_=0, max_=0)}, nodes=nodes, replicas=replicas)


def test_another_node_naming_a_failed_replica_does_not_keep_it_or_its_gpus() -> None:
    squatter = node("node02", seen=T, shards=[ShardState(replica_id="m-0001", rank=0, state="running")])
    intents = reconcile(world([node("node01", seen=T), squatter], [failed_on("node01")]))
    assert [i.replica_id for i in intents if isinstance(i, Reap)] == ["m-0001"]


def test_its_own_node_still_running_it_keeps_it_until_stopped() -> None:
    owner = node("node01", seen=T, shards=[ShardState(replica_id="m-0001", rank=0, state="running")])
    intents = reconcile(world([owner], [failed_on("node01")]))
    assert not [i for i in intents if isinstance(i, Reap)]


def test_ids_made_in_one_pass_share_nothing_guessable_and_each_has_its_own_secret() -> None:
    models = {name: model(name, gpus_per_shard=1, min_=1, max_=2) for name in ("a", "b")}

    def new(entropy: bytes) -> list[ReplicaRecord]:
        w = World(now=T, started_at=T, models=models, nodes=[node("node01", seen=T)], replicas=[], entropy=entropy)
        return [added(i, T) for i in reconcile(w) if isinstance(i, Add)]

    first = new(hashlib.sha256(b"one").digest())
    suffixes = [r.id.rsplit("-", 1)[1] for r in first]
    assert len(first) == 2 and len(set(suffixes)) == 2 and all(len(s) >= 12 for s in suffixes)
    assert [r.id for r in new(hashlib.sha256(b"two").digest())] != [r.id for r in first]  # not from name and time
    secrets = [r.secret for r in first]
    assert all(len(s) >= 32 for s in secrets) and len(set(secrets)) == 2
    assert all(s not in repr(r) for s, r in zip(secrets, first, strict=True))
