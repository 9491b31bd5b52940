"""Mutual TLS with certificates from our CA: a real aiohttp server on 127.0.0.1, and handshakes in memory."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from llmgw.core.errors import PKIError
from llmgw.pki import CA_CERT, client_context, init_ca, issue, peer_identity, peer_node_id, server_context


@dataclass
class Pki:
    ca: Path
    server: tuple[Path, Path]
    node: tuple[Path, Path]
    foreign: tuple[Path, Path]  # same node id, signed by another CA


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    init_ca(ours)
    init_ca(theirs, name="someone else's CA")
    return Pki(
        ca=ours / CA_CERT,
        server=issue(ours, "control", ips=["127.0.0.1"], server=True),
        node=issue(ours, "node01"),
        foreign=issue(theirs, "node01"),
    )


@dataclass
class Server:
    url: str
    seen: list[str | None] = field(default_factory=list)  # peer node id per handled request


@pytest_asyncio.fixture
async def server(pki: Pki) -> AsyncIterator[Server]:
    srv = Server(url="")

    async def whoami(request: web.Request) -> web.Response:
        node = peer_node_id(request.transport.get_extra_info("peercert") if request.transport else None)
        srv.seen.append(node)
        return web.json_response({"node": node})

    app = web.Application()
    app.router.add_get("/whoami", whoami)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context(*pki.server, pki.ca, require_client=True))
    await site.start()
    port = runner.addresses[0][1]
    srv.url = f"https://127.0.0.1:{port}/whoami"
    try:
        yield srv
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_client_from_our_ca_is_accepted_and_named(pki: Pki, server: Server) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(server.url, ssl=client_context(*pki.node, pki.ca)) as resp:
            assert resp.status == 200
            assert await resp.json() == {"node": "node01"}
    assert server.seen == ["node01"]


@pytest.mark.asyncio
async def test_client_from_another_ca_is_refused_before_http(pki: Pki, server: Server) -> None:
    async with aiohttp.ClientSession() as session:
        # TLS 1.3: the client finishes its half of the handshake first, then the server rejects the certificate
        # and closes: a connection error, never an HTTP status.
        with pytest.raises(aiohttp.ClientConnectionError) as err:
            async with session.get(server.url, ssl=client_context(*pki.foreign, pki.ca)):
                pass
        assert not isinstance(err.value, aiohttp.ClientResponseError)
        # TLS 1.2: the refusal lands inside the client's handshake, so connecting itself fails.
        tls12 = client_context(*pki.foreign, pki.ca)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(aiohttp.ClientConnectorError):
            async with session.get(server.url, ssl=tls12):
                pass
    assert server.seen == []


@pytest.mark.asyncio
async def test_client_without_a_certificate_is_refused(pki: Pki, server: Server) -> None:
    no_cert = ssl.create_default_context(cafile=pki.ca)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError) as err:
            async with session.get(server.url, ssl=no_cert):
                pass
        assert not isinstance(err.value, aiohttp.ClientResponseError)
    assert server.seen == []


@pytest.mark.asyncio
async def test_client_refuses_a_server_from_another_ca(pki: Pki, server: Server, tmp_path: Path) -> None:
    other = tmp_path / "other-trust"
    init_ca(other)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with session.get(server.url, ssl=client_context(*pki.node, other / CA_CERT)):
                pass
    assert server.seen == []


class ServerRefused(Exception):
    def __init__(self, error: ssl.SSLError) -> None:
        super().__init__(str(error))
        self.error = error


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, hostname: str) -> ssl.SSLObject:
    """Run a TLS handshake in memory; return the server's side. A server-side failure raises ServerRefused; a
    client-side one raises the client's ssl.SSLError."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=hostname)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client_done = server_done = False
    for _ in range(20):  # a handshake takes a handful of flights
        if not client_done:
            try:
                client.do_handshake()
                client_done = True
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        if not server_done:
            try:
                server.do_handshake()
                server_done = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as e:
                raise ServerRefused(e) from e
        c_in.write(s_out.read())
        if client_done and server_done:
            return server
    raise AssertionError("handshake neither finished nor failed")


def test_server_handshake_fails_for_a_foreign_or_missing_client_certificate(pki: Pki) -> None:
    server_ctx = server_context(*pki.server, pki.ca, require_client=True)

    accepted = _handshake(server_ctx, client_context(*pki.node, pki.ca), "127.0.0.1")
    assert peer_node_id(accepted.getpeercert()) == "node01"

    with pytest.raises(ServerRefused) as foreign:
        _handshake(server_ctx, client_context(*pki.foreign, pki.ca), "127.0.0.1")
    assert isinstance(foreign.value.error, ssl.SSLCertVerificationError)
    assert foreign.value.error.verify_message == "unable to get local issuer certificate"

    with pytest.raises(ServerRefused) as missing:
        _handshake(server_ctx, ssl.create_default_context(cafile=pki.ca), "127.0.0.1")
    assert missing.value.error.reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE"


def test_client_checks_the_server_host_name(pki: Pki) -> None:
    server_ctx = server_context(*pki.server, pki.ca, require_client=True)
    # The control plane's certificate names "control" and 127.0.0.1, not "node01".
    with pytest.raises(ssl.SSLCertVerificationError, match=r"(?i)hostname|match"):
        _handshake(server_ctx, client_context(*pki.node, pki.ca), "node01")


def test_server_without_client_auth_accepts_anyone(pki: Pki) -> None:
    server_ctx = server_context(*pki.server, pki.ca, require_client=False)
    accepted = _handshake(server_ctx, ssl.create_default_context(cafile=pki.ca), "control")
    assert accepted.getpeercert() is None
    assert server_ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_peer_node_id_reads_only_an_unambiguous_cn() -> None:
    assert peer_node_id(None) is None
    assert peer_node_id({}) is None
    subject = ((("organizationName", "x"),), (("commonName", "node01"),))
    assert peer_node_id({"subject": subject}) == "node01"
    two = ((("commonName", "node01"),), (("commonName", "node02"),))
    assert peer_node_id({"subject": two}) is None
    assert peer_node_id({"subject": ((("organizationName", "x"),),)}) is None


def test_missing_or_wrong_files_raise_pki_errors(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(PKIError, match="missing"):
        client_context(tmp_path / "nope.crt", tmp_path / "nope.key", pki.ca)
    with pytest.raises(PKIError, match="CA certificate missing"):
        server_context(*pki.server, tmp_path / "nope.crt", require_client=True)
    with pytest.raises(PKIError):  # the node's certificate with the server's key
        client_context(pki.node[0], pki.server[1], pki.ca)


def test_the_control_planes_certificate_is_no_client_and_a_node_carries_the_node_role(pki: Pki) -> None:
    server_ctx = server_context(*pki.server, pki.ca, require_client=True)
    with pytest.raises(ServerRefused) as wrong:
        _handshake(server_ctx, client_context(*pki.server, pki.ca), "127.0.0.1")
    assert "purpose" in str(wrong.value.error)
    accepted = _handshake(server_ctx, client_context(*pki.node, pki.ca), "127.0.0.1")
    ident = peer_identity(accepted)
    assert ident is not None and ident.node_id == "node01" and ident.node_role and ident.ips == ()
    assert int(ident.serial, 16) > 0
