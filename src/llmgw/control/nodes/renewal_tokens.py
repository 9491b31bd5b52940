"""The control plane's side of renewals (wire/renewal.py): the token each node's last full report was answered
with, and each node's desired state kept with its etag, so that a renewal of an unchanged node derives nothing.

A desired state is kept under the versions of everything it is derived from: the replicas (registry.generation),
the catalog, the hub's resolutions, the revocations; for a node with a shard whose weights are fetched (its plan
reads the other nodes of its fabric and who fetches from the origin), the nodes' records and the fetch leaders too.
A node with a shard of a stopping replica is never kept: whether it still drains moves with time and requests.
Tokens live in memory only: after a restart no token is known, and every node sends its report whole."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from llmgw.records.state import ReplicaRecord
from llmgw.wire.messages import DesiredState
from llmgw.wire.renewal import RenewalAnswer

Key = tuple[int, ...]


@dataclass(frozen=True)
class KeptDesired:
    """A node's desired state as last derived (its renewal token left out), its etag, and what it was derived from:
    `key` None when it must be derived anew every time; `fabric` when its versions include the nodes'."""

    key: Key | None
    fabric: bool
    desired: DesiredState
    etag: str


def etag_of(desired: DesiredState) -> str:
    return hashlib.blake2b(desired.model_dump_json().encode(), digest_size=12).hexdigest()


def drains_here(node_id: str, replicas: list[ReplicaRecord]) -> bool:
    """The node has a shard of a replica told to stop (it may drain for a while): its desired state moves with
    time and requests in flight, not with any version."""
    return any(r.stop is not None and not r.failed and any(a.node_id == node_id for a in r.assignments)
               for r in replicas)


@dataclass(frozen=True)
class RenewalReply:
    """A renewal's outcome: `why` (words) when the node must send its report whole, else the answer's JSON."""

    why: str = ""
    answer: str = ""


class RenewalTokens:
    """Per node: the renewal token last handed out here, and the desired state last derived."""

    def __init__(self) -> None:
        self._tokens: dict[str, str] = {}
        self._held: dict[str, KeptDesired] = {}
        self._unchanged: dict[int, str] = {}  # wire version -> the answer "nothing new", made once

    def grant(self, node_id: str) -> str:
        """A new token for a full report just taken: a renewal names it, and only it."""
        token = self._tokens[node_id] = secrets.token_urlsafe(18)
        return token

    def token(self, node_id: str) -> str | None:
        return self._tokens.get(node_id)

    def held(self, node_id: str, base: Key, fabric: Key) -> KeptDesired | None:
        """The desired state kept for this node, if every version it was derived from is still current."""
        h = self._held.get(node_id)
        if h is None or h.key is None or h.key != (base + fabric if h.fabric else base):
            return None
        return h

    def keep(self, node_id: str, key: Key | None, fabric: bool, desired: DesiredState) -> KeptDesired:
        h = KeptDesired(key, fabric, desired, etag_of(desired))
        self._held[node_id] = h
        return h

    def unchanged(self, version: int) -> str:
        """The answer to a renewal whose etag is current."""
        text = self._unchanged.get(version)
        if text is None:
            text = self._unchanged[version] = RenewalAnswer(version=version).model_dump_json()
        return text
