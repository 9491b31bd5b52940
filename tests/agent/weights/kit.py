"""What the weights tests share: a PKI of nodes, a fetcher for a node, waiting for a transfer to end."""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmgw.agent.redirects import PUBLIC_ONLY, Redirects
from llmgw.agent.weights import local
from llmgw.agent.weights.fetcher import Fetcher, Outcome, Waiting
from llmgw.core.clock import SystemClock
from llmgw.pki.ca import init_ca, issue
from llmgw.pki.tls import client_context, server_context
from llmgw.wire.messages import WeightsPlan
from tests.harness import await_until


@dataclass
class Pki:
    dir: Path

    def client(self, name: str) -> ssl.SSLContext:
        return client_context(self.dir / f"{name}.crt", self.dir / f"{name}.key", self.dir / "ca.crt")

    def server(self, name: str, require_client: bool = True) -> ssl.SSLContext:
        return server_context(self.dir / f"{name}.crt", self.dir / f"{name}.key", self.dir / "ca.crt",
                              require_client=require_client)


def make_pki(d: Path) -> Pki:
    """A CA, three nodes and a control plane, all on 127.0.0.1."""
    init_ca(d)
    for n in ("node01", "node02", "node03"):
        issue(d, n, ips=["127.0.0.1"])
    issue(d, "controlplane", ips=["127.0.0.1"], server=True)
    return Pki(d)


def fetcher(d: Path, budget: int | None = None, network: bool = False, in_use: set[Path] | None = None,
            tls: Callable[[], ssl.SSLContext] | None = None, redirects: Redirects = PUBLIC_ONLY) -> Fetcher:
    """node01's fetcher, its weights in `d`."""
    return Fetcher(d, SystemClock(), tls, "node01", budget, 1 << 40, network=lambda: network,
                   in_use=lambda: in_use if in_use is not None else set(), timeout=5.0, redirects=redirects)


async def settled(f: Fetcher, url: str, plan: WeightsPlan | None = None) -> Outcome:
    """What ensure() says once the transfer has ended, either way."""
    def ended() -> Outcome | None:
        o = f.ensure(url, plan)
        return None if isinstance(o, Waiting) else o

    got: Outcome = await await_until(ended, 30, f"{url} fetched or refused")
    return got


def hold(weights_dir: Path, url: str, data: bytes) -> Path:
    """A file this node fetched earlier, whole."""
    target = local.target_for(weights_dir, url)
    target.parent.mkdir(parents=True)
    target.write_bytes(data)
    local.record(target.parent, url, len(data), hashlib.sha256(data).hexdigest())
    return target
