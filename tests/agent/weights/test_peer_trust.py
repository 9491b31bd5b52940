"""Hostile peers and hostile certificates: a peer with a bad copy, a revoked node, a node posing as the plane."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from llmgw.agent.weights import local
from llmgw.agent.weights.fetcher import Ready
from llmgw.agent.weights.serve import start_peer_listener
from llmgw.pki.tls import server_context
from llmgw.wire.messages import Hardware, NodeReport, WeightsPeer, WeightsPlan
from tests.agent.installs.release import Release, release_server
from tests.agent.weights.kit import Pki, fetcher, hold, settled
from tests.harness import free_port, plane_in

DATA = os.urandom(3_000_000)
DIGEST = hashlib.sha256(DATA).hexdigest()


async def test_a_peer_with_a_bad_copy_falls_back_to_the_origin(tmp_path: Path, pki: Pki, origin: Release) -> None:
    """node03 serves the right size but wrong bytes (bit rot, a copy made before the catalog had a digest, a
    compromised node): the digest catches it and the job tries the next source, so one bad holder cannot keep
    the fabric from the file while the origin is healthy."""
    origin.files["model.gguf"] = DATA
    bad = bytearray(DATA)
    bad[-1] ^= 0xFF
    ctx = server_context(pki.dir / "node03.crt", pki.dir / "node03.key", pki.dir / "ca.crt", require_client=True)
    with release_server(Release(files={"v1/weights": bytes(bad)}), tls=ctx) as peer:
        f = fetcher(tmp_path / "node01", tls=lambda: pki.client("node01"))
        plan = WeightsPlan(sha256=DIGEST, size=len(DATA), origin=True,
                           peers=[WeightsPeer(node_id="node03", address="127.0.0.1", port=peer.port)])
        got = await settled(f, origin.url("model.gguf"), plan)
        await f.close()
    assert isinstance(got, Ready) and got.path.read_bytes() == DATA, got


@pytest.fixture
async def peer02(tmp_path: Path, pki: Pki) -> AsyncIterator[tuple[int, str]]:
    url = "http://127.0.0.1:9/models/model.gguf"
    target = local.target_for(tmp_path / "node02", url)
    target.parent.mkdir(parents=True)
    target.write_bytes(DATA)
    local.record(target.parent, url, len(DATA), DIGEST)
    port = free_port()
    listener = await start_peer_listener(tmp_path / "node02", "127.0.0.1", port, pki.server("node02"))
    yield port, url
    await listener.cleanup()


async def test_a_revoked_node_gets_no_weights(tmp_path: Path, pki: Pki) -> None:
    """The operator revokes node03 (a stolen machine): the control plane refuses it, and every node's peer
    listener must too, for the 90 days its certificate stays valid: the revocation list comes with the desired
    state, and the listener consults it."""
    url = "http://127.0.0.1:9/models/model.gguf"
    hold(tmp_path / "node02", url, DATA)
    plane = plane_in(tmp_path / "plane")
    await plane.revoke("node03", "", "stolen")
    desired = plane.heartbeats.heartbeat(NodeReport(node_id="node02", address="127.0.0.1", hardware=Hardware()))
    assert desired.revoked == ["node03"]
    revoked = frozenset(desired.revoked)
    port = free_port()
    listener = await start_peer_listener(tmp_path / "node02", "127.0.0.1", port, pki.server("node02"),
                                         lambda ident: ident.node_id in revoked or ident.serial in revoked)
    try:
        for node, want in (("node03", 403), ("node01", 200)):
            async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{port}/v1/weights",
                                                           params={"source": url}, ssl=pki.client(node),
                                                           server_hostname="node02") as r:
                assert r.status == want, f"{node} was answered {r.status}"
    finally:
        await listener.cleanup()
