"""What a transaction offers the shared statements (store/sql.py, store/chargeback_sql.py), and the leader's fence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from llmgw.core.errors import Deposed

Row = tuple[Any, ...]


class Tx(Protocol):
    """What a transaction offers the shared statements."""

    def run(self, sql: str, args: Sequence[object] = ()) -> int: ...  # rows affected
    def run_many(self, sql: str, rows: list[Sequence[object]]) -> None: ...
    def one(self, sql: str, args: Sequence[object] = ()) -> Row | None: ...
    def serialize(self, key: int) -> None: ...  # until this transaction ends, others that ask for `key` wait


# keys of serialize(): writes that replace a whole table, so that two at once cannot interleave
CATALOG = 7_331_002


def _fence(tx: Tx, epoch: int | None) -> None:
    """Within a leader's write: go on only if `epoch` is still the lease's. The row is updated (to itself), not just
    read, so it stays locked to this transaction: a new leader's takeover waits for this write to commit, and this
    write cannot commit after a takeover it did not see."""
    if epoch is not None and not tx.run("UPDATE leader SET epoch = epoch WHERE id = 1 AND epoch = ?", (epoch,)):
        raise Deposed(f"refused a write fenced at epoch {epoch}: another control plane has led since")
