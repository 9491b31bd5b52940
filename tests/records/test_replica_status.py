"""A replica's status is its conditions: failure is the Failed condition and release the Released one. Rows written
with the old flags still load, and rows written now still carry the flags for a server of the previous release."""

from __future__ import annotations

import json
from pathlib import Path

from llmgw.core.conditions import ConditionType, Status
from llmgw.core.reasons import Reason
from llmgw.reconcile.transitions import failed, released
from llmgw.records.state import Phase, ReplicaRecord, ShardAssignment, replica_phase
from llmgw.store.sqlite import SqliteStore

T = 1_800_000_000.0
OLD_ROW = {  # as a server before this change wrote it
    "id": "m-1", "model": "m", "created_at": T - 60, "shards_expected": 1,
    "assignments": [{"rank": 0, "node_id": "n1", "address": "10.0.0.1", "gpus": [0]}],
    "conditions": [
        {"type": "Scheduled", "status": "True", "reason": "Placed", "message": "on n1", "last_transition": T - 60},
        {"type": "Ready", "status": "False", "reason": "WeightsUnusable", "message": "rank 0 on n1 failed: empty",
         "last_transition": T - 10},
    ],
    "failed": True, "failed_at": T - 10, "released": True,
}


def placed() -> ReplicaRecord:
    a = ShardAssignment(rank=0, node_id="n1", address="10.0.0.1", gpus=[0])
    return ReplicaRecord(id="m-1", model="m", created_at=T - 60, shards_expected=1, assignments=[a])


def test_an_old_row_with_flags_loads_as_conditions() -> None:
    r = ReplicaRecord.model_validate_json(json.dumps(OLD_ROW))
    c = r.condition(ConditionType.Failed)
    assert c is not None and (c.status, c.reason, c.message) == (Status.TRUE, Reason.WeightsUnusable,
                                                                  "rank 0 on n1 failed: empty")
    assert r.failed and r.failed_at == T - 10 and r.released and replica_phase(r) == Phase.Failed
    assert ReplicaRecord.model_validate({**OLD_ROW, "failed": False, "released": False}).failed is False


def test_failure_and_release_are_conditions_and_phase_reads_them() -> None:
    r = placed()
    assert not r.failed and replica_phase(r) == Phase.Starting
    f = failed(r, Reason.NodeLost, "node n1 lost (rank 0)", T)
    assert f.failed and f.failed_at == T and not f.released and replica_phase(f) == Phase.Failed
    gone = released(f, T + 5)
    c = gone.condition(ConditionType.Released)
    assert gone.released and c is not None and c.reason == Reason.ShardsGone
    assert released(gone, T + 9) is gone  # releasing twice is no change: nothing to write


def test_a_row_written_now_carries_the_flags_and_reads_back_the_same(tmp_path: Path) -> None:
    r = released(failed(placed(), Reason.ShardFailed, "rank 0 on n1 failed: boom", T), T + 5)
    row = json.loads(r.model_dump_json())
    assert (row["failed"], row["failed_at"], row["released"]) == (True, T, True)  # what an older server reads
    store = SqliteStore(tmp_path / "s.db").open()
    store.put_replica(r)
    (back,) = store.list_replicas()
    assert back == r and back.failed and back.released
