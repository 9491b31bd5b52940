"""This server's part in the lease that says which control plane reconciles (store `lead`, the `leader` row).

Every server serves; one leads: it alone runs reconcile passes and writes replicas, each write fenced by the
epoch it leads at, so one that was paused past its lease and wakes up still believing it leads cannot write (the
store refuses: Deposed). The others follow and try to take the lease once it expires."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from enum import StrEnum

from llmgw.store.base import Lease


class Turn(StrEnum):
    Kept = "kept"  # as it was: leading and still leading, or following and still following
    Gained = "gained"
    Lost = "lost"


def holder_id() -> str:
    """Unique per process start: a restarted server never mistakes the lease of its previous life for its own."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"[:120]


@dataclass
class Leadership:
    holder: str
    ttl: float
    epoch: int | None = None  # the epoch this server leads at; None: it follows
    lease: Lease | None = None  # the lease as last seen (whoever holds it)

    @property
    def leading(self) -> bool:
        return self.epoch is not None

    def seen(self, lease: Lease) -> Turn:
        """The lease as the store answered `lead`: whether this server leads now."""
        was = self.epoch
        self.lease = lease
        self.epoch = lease.epoch if lease.holder == self.holder else None
        if was == self.epoch:
            return Turn.Kept
        return Turn.Gained if self.epoch is not None else Turn.Lost

    def unreachable(self, now: float) -> Turn:
        """`lead` failed (the store is unreachable): past the lease's expiry, another may take it; stop leading."""
        if self.epoch is not None and self.lease is not None and now >= self.lease.expires_at:
            self.epoch = None
            return Turn.Lost
        return Turn.Kept
