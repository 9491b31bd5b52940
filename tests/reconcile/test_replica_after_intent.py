"""What each replica intent does to its record (reconcile/transitions.py's after(), pure): the placement and the
conditions it sets, the refusal kept when said again (so nothing is written), release, sleep and wake."""

from __future__ import annotations

import pytest

from llmgw.core.conditions import Condition, ConditionType, Status
from llmgw.core.explanation import Explanation, NodeVerdict
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Add, Place, Release, Stop, Unplaced
from llmgw.reconcile.sleep_intents import Sleep, Wake
from llmgw.reconcile.transitions import after
from llmgw.records.state import ReplicaRecord, ShardAssignment

T0, NOW = 1_000.0, 2_000.0


def record() -> ReplicaRecord:
    return after(None, Add("m-1", "m", 1, "secret"), T0)


def cond(r: ReplicaRecord, t: ConditionType) -> tuple[Status, Reason, str, float]:
    c = r.condition(t)
    assert c is not None, t
    return c.status, c.reason, c.message, c.last_transition


def refusal(at: float, excluded: int = 2) -> Explanation:
    return Explanation(model="m", at=at, placed=False, nodes_evaluated=excluded,
                       filtered={Reason.InsufficientGPUs: excluded},
                       verdicts=[NodeVerdict(node_id=f"n{i}", reason=Reason.InsufficientGPUs, message="0 GPUs free")
                                 for i in range(1, excluded + 1)])


def test_a_placed_replica_holds_its_shards_and_starts() -> None:
    shards = (ShardAssignment(rank=0, node_id="n1", address="10.0.0.1", gpus=[0]),
              ShardAssignment(rank=1, node_id="n2", address="10.0.0.2", gpus=[0]))
    chosen = Explanation(model="m", at=NOW, placed=True, nodes_evaluated=2)
    r = after(record(), Place("m-1", shards, chosen, 2), NOW)  # its profile now asks for two nodes
    assert r.assignments == list(shards) and r.explanation == chosen and r.shards_expected == 2
    assert cond(r, ConditionType.Scheduled) == (Status.TRUE, Reason.Placed, "on n1, n2", NOW)
    assert cond(r, ConditionType.Ready) == (Status.FALSE, Reason.ShardsStarting, "placed", NOW)


def test_a_model_that_cannot_be_placed_yet_says_why_without_asking_any_node() -> None:
    unasked = Explanation(model="m", at=NOW, placed=False)
    r = after(record(), Unplaced("m-1", unasked, reason=Reason.HubResolving, words="resolving org/m"), NOW)
    assert cond(r, ConditionType.Scheduled) == (Status.FALSE, Reason.HubResolving, "resolving org/m", NOW)
    assert r.explanation == unasked


def test_a_refusal_names_the_first_reasons_and_is_unschedulable_with_nothing_to_wait_for() -> None:
    r = after(record(), Unplaced("m-1", refusal(NOW)), NOW)
    assert cond(r, ConditionType.Scheduled) == (
        Status.FALSE, Reason.Unschedulable, "no node can take the shard;   InsufficientGPUs: 2 nodes excluded", NOW)
    assert r.explanation == refusal(NOW)


def test_the_same_refusal_said_again_keeps_the_old_explanation_and_a_new_one_replaces_it() -> None:
    first = after(record(), Unplaced("m-1", refusal(NOW)), NOW)
    again = after(first, Unplaced("m-1", refusal(NOW + 5)), NOW + 5)
    assert again.explanation == refusal(NOW)  # its time included: the record is unchanged, nothing is written
    assert again == first
    other = after(again, Unplaced("m-1", refusal(NOW + 10, excluded=3)), NOW + 10)
    assert other.explanation == refusal(NOW + 10, excluded=3)


def test_release_sleep_and_wake_each_set_their_state() -> None:
    failed = record().model_copy(update={"conditions": [
        Condition(type=ConditionType.Failed, status=Status.TRUE, reason=Reason.ShardsGone, message="",
                  last_transition=NOW)]})
    released = after(failed, Release("m-1"), NOW + 1)
    assert released.released and cond(released, ConditionType.Released) == (Status.TRUE, Reason.ShardsGone, "",
                                                                              NOW + 1)
    assert after(released, Release("m-1"), NOW + 2) is released
    asleep = after(record(), Sleep("m-1", 1, "unused for 10m"), NOW)
    assert (asleep.sleep_level, asleep.slept_at) == (1, NOW)
    assert cond(asleep, ConditionType.Ready)[:3] == (Status.FALSE, Reason.Sleeping, "unused for 10m")
    awake = after(asleep, Wake("m-1"), NOW + 3)
    assert (awake.sleep_level, awake.slept_at, awake.woken_at) == (0, None, NOW + 3)


def test_a_stop_for_a_removed_model_names_the_model() -> None:
    r = after(record(), Stop("m-1", Reason.Removed, ""), NOW)
    assert r.stop is not None and r.stop.message == "model m is no longer in the catalog"


def test_an_intent_for_a_replica_that_does_not_exist_says_which() -> None:
    with pytest.raises(AssertionError, match="Release of replica m-1, which does not exist"):
        after(None, Release("m-1"), NOW)
