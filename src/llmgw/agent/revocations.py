"""The node ids and certificate serials the control plane revoked, as this node last heard them. Kept on disk, so a
restarted agent refuses them before its first heartbeat."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from llmgw.agent.supervisor.process import write_private
from llmgw.pki.tls import PeerIdentity

log = logging.getLogger(__name__)


class Revocations:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: frozenset[str] = self._load()

    def _load(self) -> frozenset[str]:
        try:
            items = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return frozenset()
        return frozenset(str(x) for x in items) if isinstance(items, list) else frozenset()

    def learn(self, items: list[str]) -> None:
        """The control plane's revocations, from its desired state: used, and kept for the next start."""
        if frozenset(items) == self.items:
            return
        self.items = frozenset(items)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_private(self.path, json.dumps(sorted(self.items)) + "\n")
        except OSError as e:
            log.error("cannot keep the revocation list in %s: %s", self.path, e)

    def refuses(self, ident: PeerIdentity) -> bool:
        return ident.node_id in self.items or ident.serial in self.items
