"""Node liveness shared among servers on one store, without a write per node: each pass, a server writes one row of
the nodes it heard itself within the last WINDOW (a renewal or a report, registry.heard_here) and reads the
rows the others wrote since its last read. Every server thus counts a node's silence from the same hearings; the
leader alone declares a node lost, in the node's record, which the others read. Pure bookkeeping: following.py
reads and writes the store."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from llmgw.store.base import Renewals

# rows are read from this long before the last read (the writers' clocks, commit order), and from node_lost_after
# before when longer: a writer's clock behind by less than that still has its rows read (its hearings then look as
# much older, which node_lost_after bounds anyway). Rows are rewritten every pass, so this costs no more rows.
RENEWALS_SLACK_S = 10.0


def liveness_for(reconcile_interval: float, heartbeat_interval: float, node_lost_after: float) -> Liveness:
    """A server's row reaches back a few passes, and a heartbeat at least, so a reader that misses one write still
    finds its renewals in the next; rows are read with RENEWALS_SLACK_S or node_lost_after of slack."""
    return Liveness(window=max(3 * reconcile_interval, heartbeat_interval),
                    slack=max(RENEWALS_SLACK_S, node_lost_after))


@dataclass
class Liveness:
    window: float
    slack: float = RENEWALS_SLACK_S
    read_at: float | None = None  # when the others' rows were last read (None: not yet)
    merged: dict[str, float] = field(default_factory=dict)  # server -> the time of its row last taken in
    leader: tuple[str, float] = ("", 0.0)  # the lease's holder, and when this server first saw it hold the lease

    def row(self, heard_here: dict[str, float], now: float) -> dict[str, float]:
        """This server's row, written every pass, even empty: the nodes it heard itself within the window. A row
        fresh each pass also tells the others that this server reads renewals (older_leader)."""
        return {n: t for n, t in heard_here.items() if t > now - self.window}

    def since(self, now: float) -> float:
        """Read the rows written after this."""
        return (now - self.window if self.read_at is None else self.read_at) - self.slack

    def taken(self, rows: list[Renewals], me: str, now: float) -> list[tuple[str, float]]:
        """(node, when heard) from the others' rows not taken in before (a row read again is skipped whole)."""
        since = self.since(now)
        self.read_at = now
        self.merged = {s: at for s, at in self.merged.items() if at > since}  # servers gone stop being kept
        out: list[tuple[str, float]] = []
        for server, at, heard in rows:
            if server == me or self.merged.get(server, -1.0) >= at:
                continue
            self.merged[server] = at
            out.extend(heard.items())
        return out

    def older_leader(self, rows: list[Renewals], leader: str, me: str, now: float) -> bool:
        """Whether the lease's holder is of a release before renewals (it writes no row): it reads none either, and
        counts a node's silence from its record. Never this server, nor when no one holds the lease (""); a leader
        seen for less than the window may not have written its first row yet (servers started together)."""
        if leader != self.leader[0]:
            self.leader = (leader, now)
        if leader in ("", me) or now - self.leader[1] < self.window:
            return False
        fresh = now - self.window - RENEWALS_SLACK_S  # a few passes, and a writer's clock somewhat behind
        return not any(server == leader and at > fresh for server, at, _ in rows)


class NewestRow:
    """This server's row, handed to the store writer once however many passes offer a newer one while a write
    waits (a slow or failing store): the queued write takes the newest row when it runs, so the writer's queue
    holds one row at most, never one per pass."""

    def __init__(self, put: Callable[[float, dict[str, float]], None]) -> None:
        self._put = put
        self._lock = threading.Lock()  # the event loop offers, the writer's thread writes
        self._next: tuple[float, dict[str, float]] | None = None
        self._queued = False

    def offer(self, at: float, row: dict[str, float]) -> bool:
        """Keep the row as the newest; True when a write must be queued (none is)."""
        with self._lock:
            self._next = (at, row)
            queued, self._queued = self._queued, True
            return not queued

    def failed(self) -> None:
        """The write could not be queued, or was run in the caller and failed: the next offer queues one again."""
        with self._lock:
            self._queued = False

    def write(self) -> None:
        """The writer's job: the newest row, until none newer came while it was written (a failure is raised, and
        the writer tries again, with the newest row then)."""
        while True:
            with self._lock:
                sent = self._next
            if sent is not None:
                self._put(*sent)
            with self._lock:
                if self._next is sent:
                    self._queued = False
                    return
