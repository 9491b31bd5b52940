"""Copying weights from a peer node: real listeners with the nodes' own certificates (mutual TLS), a peer that
dies part way, and clients that are not nodes of this cluster."""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from llmgw.agent.weights import local
from llmgw.agent.weights.fetcher import Fetcher, Ready
from llmgw.agent.weights.serve import start_peer_listener
from llmgw.core.clock import SystemClock
from llmgw.pki.ca import init_ca, issue
from llmgw.pki.tls import client_context, server_context
from llmgw.wire.messages import WeightsPeer, WeightsPlan
from tests.agent.installs.release import Release, release_server
from tests.agent.weights.kit import Pki, fetcher, hold, settled
from tests.harness import await_until, free_port

DATA = os.urandom(6_000_000)
DIGEST = hashlib.sha256(DATA).hexdigest()
URL = "http://127.0.0.1:9/models/model.gguf"  # the origin: nothing listens there; peers are all there is


@pytest.fixture
async def peer02(tmp_path: Path, pki: Pki) -> AsyncIterator[int]:
    hold(tmp_path / "node02", URL, DATA)
    port = free_port()
    listener = await start_peer_listener(tmp_path / "node02", "127.0.0.1", port, pki.server("node02"))
    yield port
    await listener.cleanup()


def copier(d: Path, pki: Pki) -> Fetcher:
    return fetcher(d, tls=lambda: pki.client("node01"))


async def test_a_node_copies_from_a_peer_of_its_fabric(tmp_path: Path, pki: Pki, peer02: int,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    f = copier(tmp_path / "node01", pki)
    plan = WeightsPlan(sha256=DIGEST, size=len(DATA), peers=[WeightsPeer(node_id="node02", address="127.0.0.1",
                                                                          port=peer02)])
    got = await settled(f, URL, plan)
    assert isinstance(got, Ready) and got.path.read_bytes() == DATA, got
    served = [r.getMessage() for r in caplog.records if r.getMessage().startswith("weights: serving")]
    assert served == ["weights: serving model.gguf to node node01 (whole)"]
    await f.close()


@pytest.fixture
def dying_peer(pki: Pki) -> Iterator[Release]:
    """node03, holding the file, whose connection drops after 2.5 MB."""
    name = "v1/weights"
    rel = Release(files={name: DATA}, cut_after={name: 2_500_000})
    ctx = server_context(pki.dir / "node03.crt", pki.dir / "node03.key", pki.dir / "ca.crt", require_client=True)
    with release_server(rel, tls=ctx) as r:
        yield r


async def test_a_peer_dying_mid_copy_hands_over_to_the_next_without_starting_over(
        tmp_path: Path, pki: Pki, peer02: int, dying_peer: Release, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    f = copier(tmp_path / "node01", pki)
    plan = WeightsPlan(sha256=DIGEST, peers=[
        WeightsPeer(node_id="node03", address="127.0.0.1", port=dying_peer.port),
        WeightsPeer(node_id="node02", address="127.0.0.1", port=peer02),
    ])
    got = await settled(f, URL, plan)
    assert isinstance(got, Ready) and got.path.read_bytes() == DATA, got
    assert len(dying_peer.ranges) == 1
    served = [r.getMessage() for r in caplog.records if r.getMessage().startswith("weights: serving")]
    assert served == ["weights: serving model.gguf to node node01 (bytes=2500000-)"], "node02 sent only the rest"
    await f.close()


async def test_a_trickling_peer_is_left_for_the_next(tmp_path: Path, pki: Pki, peer02: int,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """node03 sends a kilobyte now and then: under the rate a transfer must keep over its window, the copier
    leaves it for node02, keeping what node03 did send, instead of being held for hours."""
    name = "v1/weights"
    rel = Release(files={name: DATA}, trickle={name: 0.05})
    with release_server(rel, tls=pki.server("node03")) as slow:
        f = Fetcher(tmp_path / "node01", SystemClock(), lambda: pki.client("node01"), "node01", None, 1 << 40,
                    network=lambda: False, in_use=set, timeout=5.0, min_rate=1e6, rate_window=0.5)
        plan = WeightsPlan(sha256=DIGEST, peers=[WeightsPeer(node_id="node03", address="127.0.0.1", port=slow.port),
                                                 WeightsPeer(node_id="node02", address="127.0.0.1", port=peer02)])
        got = await settled(f, URL, plan)
        await f.close()
    assert isinstance(got, Ready) and got.path.read_bytes() == DATA, got
    left = [r.getMessage() for r in caplog.records if "a transfer must keep" in r.getMessage()]
    assert left and "from peer node03" in left[0] and "trying the next source" in left[0], left


async def test_a_peer_is_known_by_its_certificate_not_its_address(tmp_path: Path, pki: Pki, peer02: int) -> None:
    """The plan says node03 is at node02's address: node02's certificate does not name node03, so no byte is
    taken from it (the origin, unreachable here, is the fallback)."""
    f = copier(tmp_path / "node01", pki)
    plan = WeightsPlan(peers=[WeightsPeer(node_id="node03", address="127.0.0.1", port=peer02)])
    f.ensure(URL, plan)
    await await_until(lambda: f.statuses() and "trying again" in f.statuses()[0].message, 20, "both sources failed")
    assert not local.target_for(tmp_path / "node01", URL).exists()
    await f.close()


async def _get(port: int, ctx: ssl.SSLContext | None, source: str = URL) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{port}/v1/weights",
                                                   params={"source": source}, ssl=ctx if ctx is not None else True,
                                                   server_hostname="node02") as r:
        return r.status, await r.read()


async def test_only_nodes_of_this_cluster_get_a_byte(tmp_path: Path, pki: Pki, peer02: int) -> None:
    status, body = await _get(peer02, pki.client("node01"))
    assert status == 200 and body == DATA
    anonymous = ssl.create_default_context(cafile=pki.dir / "ca.crt")
    with pytest.raises(aiohttp.ClientError):  # no client certificate: the handshake fails
        await _get(peer02, anonymous)
    other = tmp_path / "other"
    init_ca(other)
    issue(other, "node01", ips=["127.0.0.1"])
    foreign = client_context(other / "node01.crt", other / "node01.key", pki.dir / "ca.crt")
    with pytest.raises(aiohttp.ClientError):  # another CA's node
        await _get(peer02, foreign)
    cp = ssl.create_default_context(cafile=pki.dir / "ca.crt")
    cp.load_cert_chain(pki.dir / "controlplane.crt", pki.dir / "controlplane.key")
    with pytest.raises(aiohttp.ClientError):  # our CA's, but not a node's: no client role
        await _get(peer02, cp)


async def test_only_whole_fetched_files_are_served(tmp_path: Path, pki: Pki, peer02: int) -> None:
    ctx = pki.client("node01")
    half = local.target_for(tmp_path / "node02", "http://o/half.gguf")
    half.parent.mkdir(parents=True)
    half.with_name("half.gguf.part").write_bytes(b"GGUF" * 10)
    assert (await _get(peer02, ctx, "http://o/half.gguf"))[0] == 404
    for probe in ("/etc/passwd", "file:///etc/passwd", "../../pki/ca.key", "http://x/" + "a" * 3000):
        status, _ = await _get(peer02, ctx, probe)
        assert status in (400, 404), probe
    assert (await _get(peer02, ctx, "http://127.0.0.1:9/other.gguf"))[0] == 404
