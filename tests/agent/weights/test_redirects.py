"""Where an origin may send a node: a redirect within the origin is followed; one to another host is followed only
to a public address or one agent.yaml allows (`redirects_allowed`), never from https to plain http, never to
anything but http(s). Loopback stands for every private range here: the node's own services (the control plane's
/metrics, the link-local metadata service) are what a hostile origin points it at. Each test runs real HTTP
servers on loopback; a refused target is never even asked."""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from llmgw.agent.installs.download import download
from llmgw.agent.redirects import Redirects
from llmgw.agent.transfer import Source, fetch_part
from llmgw.agent.weights.fetcher import Failed, Fetcher, Ready
from llmgw.core.clock import SystemClock
from llmgw.core.errors import InstallRefused, TransferFailed
from llmgw.core.reasons import Reason
from llmgw.wire.messages import WeightsPlan
from tests.agent.weights.kit import Pki, settled
from tests.harness import free_port

DATA = b"GGUF" + bytes(range(256)) * 64
METRICS = b"# HELP llmgw_up 1\nllmgw_up 1\n"


@dataclass
class Site:
    port: int
    hits: list[str] = field(default_factory=list)
    scheme: str = "http"

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"


async def _serve(routes: dict[str, bytes | str], tls: ssl.SSLContext | None = None) -> tuple[Site, web.AppRunner]:
    """A server answering each path with its bytes, or with a 302 to a str; every request it gets is counted."""
    site = Site(free_port(), scheme="https" if tls else "http")

    async def handle(request: web.Request) -> web.StreamResponse:
        site.hits.append(request.path)
        answer = routes.get(request.path)
        if answer is None:
            raise web.HTTPNotFound()
        if isinstance(answer, str):
            raise web.HTTPFound(answer)
        return web.Response(body=answer)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", site.port, ssl_context=tls).start()
    return site, runner


@dataclass
class World:
    metrics: Site  # the control plane's /metrics, say: on this host, answering anyone who asks
    cdn: Site  # a second server holding the file, where a legitimate origin sends its clients
    origin: Site
    routes: dict[str, bytes | str]


@pytest.fixture
async def world() -> AsyncIterator[World]:
    metrics, r1 = await _serve({"/metrics": METRICS})
    cdn, r2 = await _serve({"/model.gguf": DATA})
    routes: dict[str, bytes | str] = {
        "/model.gguf": DATA,
        "/moved.gguf": "/model.gguf",  # within the origin
        "/to-metrics.gguf": metrics.url("/metrics"),
        "/to-localhost.gguf": metrics.url("/metrics", host="localhost"),  # a name resolving to loopback
        "/to-metadata.gguf": "http://169.254.169.254/latest/meta-data/",
        "/to-file.gguf": "file:///etc/passwd",
        "/to-cdn.gguf": cdn.url("/model.gguf"),
    }
    origin, r3 = await _serve(routes)
    yield World(metrics, cdn, origin, routes)
    for r in (r1, r2, r3):
        await r.cleanup()


async def _fetch(src: Source, part: Path) -> bytes:
    await fetch_part(src, part, max_bytes=1 << 20, progress=lambda *_: None, timeout=5.0)
    return part.read_bytes()


@pytest.mark.parametrize(("path", "words"), [
    ("/to-metrics.gguf", "a private address"),
    ("/to-localhost.gguf", "a private address"),
    ("/to-metadata.gguf", "a private address"),
    ("/to-file.gguf", "not http"),
])
async def test_a_redirect_to_a_private_address_is_refused_and_never_asked(
        world: World, tmp_path: Path, path: str, words: str) -> None:
    part = tmp_path / "m.gguf.part"
    with pytest.raises(TransferFailed) as e:
        await _fetch(Source(world.origin.url(path), name="the origin"), part)
    assert e.value.reason == Reason.DownloadFailed and not e.value.resumable, e.value
    assert "redirect" in str(e.value) and words in str(e.value), e.value
    assert world.metrics.hits == [] and world.cdn.hits == []
    assert not part.exists() or part.read_bytes() == b""


async def test_a_redirect_within_the_origin_is_followed(world: World, tmp_path: Path) -> None:
    assert await _fetch(Source(world.origin.url("/moved.gguf")), tmp_path / "m.part") == DATA


async def test_a_redirect_to_another_host_is_followed_only_where_allowed(world: World, tmp_path: Path) -> None:
    """The allow switch is what lets the CDN (on loopback here) in; it lets in nothing else on loopback."""
    with pytest.raises(TransferFailed, match="private address"):
        await _fetch(Source(world.origin.url("/to-cdn.gguf")), tmp_path / "a.part")
    assert world.cdn.hits == []
    allowed = Redirects(allowed=(f"127.0.0.1:{world.cdn.port}",))
    assert await _fetch(Source(world.origin.url("/to-cdn.gguf"), redirects=allowed), tmp_path / "b.part") == DATA
    with pytest.raises(TransferFailed, match="private address"):
        await _fetch(Source(world.origin.url("/to-metrics.gguf"), redirects=allowed), tmp_path / "c.part")
    assert world.metrics.hits == []
    network = Redirects(allowed=("127.0.0.0/8",))  # a whole range, any port
    assert await _fetch(Source(world.origin.url("/to-metrics.gguf"), redirects=network), tmp_path / "d.part") \
        == METRICS


async def test_a_redirect_is_never_followed_from_https_to_http(world: World, tmp_path: Path, pki: Pki) -> None:
    secure, runner = await _serve({"/to-cdn.gguf": world.cdn.url("/model.gguf")},
                                  tls=pki.server("controlplane", require_client=False))
    try:
        trust = ssl.create_default_context(cafile=str(pki.dir / "ca.crt"))
        allowed = Redirects(allowed=("127.0.0.0/8",))  # allowed as a place, yet not over plain http
        with pytest.raises(TransferFailed, match="from https to plain http"):
            await _fetch(Source(secure.url("/to-cdn.gguf"), ssl=trust, redirects=allowed), tmp_path / "m.part")
        assert world.cdn.hits == []
    finally:
        await runner.cleanup()


async def test_too_many_redirects_end_the_transfer(tmp_path: Path) -> None:
    loop, runner = await _serve({"/a": "/b", "/b": "/a"})
    try:
        with pytest.raises(TransferFailed, match="redirects"):
            await _fetch(Source(loop.url("/a")), tmp_path / "m.part")
        assert len(loop.hits) <= 11
    finally:
        await runner.cleanup()


async def test_weights_redirected_to_the_control_planes_metrics_are_not_weights(world: World, tmp_path: Path) -> None:
    """The finding: with no sha256 in the catalog, the page the redirect led to became the model's weights."""
    f = Fetcher(tmp_path / "w", SystemClock(), None, "node01", None, 1 << 30, network=lambda: False,
                in_use=set, timeout=5.0)
    try:
        got = await settled(f, world.origin.url("/to-metrics.gguf"), WeightsPlan())
        assert isinstance(got, Failed) and "private address" in got.message, got
        assert world.metrics.hits == []
        assert not list((tmp_path / "w").rglob("*.gguf"))
    finally:
        await f.close()
    allowed = Fetcher(tmp_path / "w2", SystemClock(), None, "node01", None, 1 << 30, network=lambda: False,
                      in_use=set, timeout=5.0, redirects=Redirects(allowed=(f"127.0.0.1:{world.cdn.port}",)))
    try:
        got = await settled(allowed, world.origin.url("/to-cdn.gguf"),
                            WeightsPlan(sha256=hashlib.sha256(DATA).hexdigest()))
        assert isinstance(got, Ready) and got.path.read_bytes() == DATA
    finally:
        await allowed.close()


async def test_an_engine_archive_follows_the_same_rule(world: World, tmp_path: Path) -> None:
    digest = hashlib.sha256(METRICS).hexdigest()  # even a digest that matches the page: the node never asks
    with pytest.raises(InstallRefused, match="private address"):
        await download(world.origin.url("/to-metrics.gguf"), tmp_path / "x.tar.gz", digest, lambda *_: None, 1 << 20)
    assert world.metrics.hits == []
    got = await download(world.origin.url("/to-cdn.gguf"), tmp_path / "y.tar.gz", hashlib.sha256(DATA).hexdigest(),
                         lambda *_: None, 1 << 20, redirects=Redirects(allowed=(f"127.0.0.1:{world.cdn.port}",)))
    assert got.read_bytes() == DATA
