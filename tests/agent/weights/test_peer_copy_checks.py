"""What a peer listener and a copier check, and when: a node revoked mid-copy is cut off, a stale file is not
pulled whole from a peer."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import aiohttp

from llmgw.agent import transfer
from llmgw.agent.weights.fetcher import Ready
from llmgw.agent.weights.serve import start_peer_listener
from llmgw.pki.tls import PeerIdentity
from llmgw.wire.messages import WeightsPeer, WeightsPlan
from tests.agent.installs.release import Release
from tests.agent.weights.kit import Pki, fetcher, hold, settled
from tests.harness import free_port

BIG = os.urandom(48 << 20)


async def test_revoking_a_node_stops_a_copy_it_already_started(tmp_path: Path, pki: Pki) -> None:
    """A stolen node that asked for a large file (140 GB in production) just before the desired state brought its
    revocation does not get every byte of it: revocation is checked during a copy, not only at its start."""
    url = "http://127.0.0.1:9/models/big.gguf"
    hold(tmp_path / "node02", url, BIG)
    revoked: set[str] = set()

    def refused(ident: PeerIdentity) -> bool:
        return ident.node_id in revoked or ident.serial in revoked

    port = free_port()
    listener = await start_peer_listener(tmp_path / "node02", "127.0.0.1", port, pki.server("node02"), refused)
    got = 0
    try:
        async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{port}/v1/weights", params={"source": url},
                                                       ssl=pki.client("node03"), server_hostname="node02") as r:
            assert r.status == 200
            got += len(await r.content.readexactly(1 << 20))
            revoked.add("node03")  # the next desired state says so
            try:
                async for chunk in r.content.iter_chunked(1 << 20):
                    got += len(chunk)
            except aiohttp.ClientError:
                pass
    finally:
        await listener.cleanup()
    assert got < len(BIG) // 2, f"the revoked node received {got} of {len(BIG)} bytes after its revocation"


async def test_a_copier_does_not_pull_a_whole_stale_file_from_a_peer(tmp_path: Path, pki: Pki, origin: Release,
                                                                     monkeypatch: object) -> None:
    """The file at the URL was re-uploaded (the catalog's sha256 changed) and node02, still holding the old one, is
    named as a peer: the copier takes none of the stale bytes (its listener says the digest, X-Llmgw-Sha256) and
    gets the file from the origin."""
    new = os.urandom(8 << 20)
    old = os.urandom(8 << 20)
    origin.files["m.gguf"] = new
    url = origin.url("m.gguf")
    hold(tmp_path / "node02", url, old)
    port = free_port()
    listener = await start_peer_listener(tmp_path / "node02", "127.0.0.1", port, pki.server("node02"))
    from_peer: list[int] = []
    real = transfer._receive

    async def receive(resp: aiohttp.ClientResponse, part: Path, have: int, *a: Any, **kw: Any) -> int:
        n = await real(resp, part, have, *a, **kw)
        if "/v1/weights" in str(resp.url):
            from_peer.append(n - have)
        return n

    monkeypatch.setattr(transfer, "_receive", receive)  # type: ignore[attr-defined]
    try:
        f = fetcher(tmp_path / "node01", tls=lambda: pki.client("node01"))
        plan = WeightsPlan(sha256=hashlib.sha256(new).hexdigest(), size=len(new),
                           peers=[WeightsPeer(node_id="node02", address="127.0.0.1", port=port)])
        got = await settled(f, url, plan)
        await f.close()
    finally:
        await listener.cleanup()
    assert isinstance(got, Ready) and got.path.read_bytes() == new
    assert sum(from_peer) == 0, f"{sum(from_peer)} bytes of a file the peer said was another were copied"
