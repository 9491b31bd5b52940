"""TLS contexts for mutual TLS between agents and the control plane, and reading the peer's node id."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from llmgw.core.errors import PKIError


def server_context(cert: Path, key: Path, ca: Path, require_client: bool) -> ssl.SSLContext:
    """A TLS 1.2+ server context presenting `cert`; with `require_client`, the handshake fails unless the client
    presents a certificate signed by `ca`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _harden(ctx)
    _load_chain(ctx, cert, key)
    if require_client:
        _load_ca(ctx, ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def client_context(cert: Path, key: Path, ca: Path) -> ssl.SSLContext:
    """A TLS 1.2+ client context presenting `cert`, trusting only `ca`, and checking the server's host name."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _harden(ctx)
    _load_chain(ctx, cert, key)
    _load_ca(ctx, ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.check_hostname = True
    return ctx


def peer_node_id(peercert: Mapping[str, Any] | None) -> str | None:
    """The CN of a verified peer certificate, as given by `transport.get_extra_info("peercert")`.

    None when there is no verified certificate (the dict is empty unless the peer was verified), no CN, or
    several different CNs (ambiguous identity).
    """
    if not peercert:
        return None
    names: set[str] = set()
    for rdn in peercert.get("subject", ()):
        for attr in rdn:
            if len(attr) == 2 and attr[0] == "commonName" and isinstance(attr[1], str):
                names.add(attr[1])
    if len(names) != 1:
        return None
    return names.pop()


@dataclass(frozen=True)
class PeerIdentity:
    """What the agent listener needs from a verified client certificate."""

    node_id: str
    serial: str  # hex, as `ctl nodes revoke --serial` takes it
    node_role: bool  # issued as a node certificate (not the control plane's, not another CA tool's)
    ips: tuple[str, ...]  # IP SANs: addresses this node may claim
    not_after: float


def peer_identity(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> PeerIdentity | None:
    """The identity in a verified peer certificate, or None (no certificate, or no single CN)."""
    if ssl_object is None:
        return None
    node_id = peer_node_id(ssl_object.getpeercert())
    der = ssl_object.getpeercert(binary_form=True)
    if node_id is None or not der:
        return None
    return _identity(der, node_id)


def speaks_as_node(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> bool:
    """The peer's verified certificate is a node's (it carries the node role)."""
    ident = peer_identity(ssl_object)
    return ident is not None and ident.node_role


def serial_text(cert: x509.Certificate) -> str:
    """A certificate's serial as llmgw writes it everywhere (a node's cert_serial, revocations, `ctl`): lowercase
    hex without leading zeros."""
    return f"{cert.serial_number:x}"


@functools.lru_cache(maxsize=4096)  # one parse per certificate, not per heartbeat
def _identity(der: bytes, node_id: str) -> PeerIdentity:
    from llmgw.pki.ca import has_node_role

    cert = x509.load_der_x509_certificate(der)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        ips = tuple(str(ip) for ip in sans.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        ips = ()
    return PeerIdentity(
        node_id=node_id,
        serial=serial_text(cert),
        node_role=has_node_role(cert),
        ips=ips,
        not_after=cert.not_valid_after_utc.timestamp(),
    )


def _harden(ctx: ssl.SSLContext) -> None:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # Strict chain checks (Python 3.13's default): our CA issues certificates that pass them.
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT


def _load_chain(ctx: ssl.SSLContext, cert: Path, key: Path) -> None:
    try:
        ctx.load_cert_chain(certfile=cert, keyfile=key)
    except FileNotFoundError as e:
        raise PKIError(f"certificate or key missing: {e.filename or f'{cert} / {key}'}") from e
    except ssl.SSLError as e:
        raise PKIError(f"cannot load certificate {cert} with key {key}: {e.reason or e}") from e
    except OSError as e:
        raise PKIError(f"cannot read certificate {cert} or key {key}: {e.strerror or e}") from e


def _load_ca(ctx: ssl.SSLContext, ca: Path) -> None:
    try:
        ctx.load_verify_locations(cafile=ca)
    except FileNotFoundError as e:
        raise PKIError(f"CA certificate missing: {ca}") from e
    except ssl.SSLError as e:
        raise PKIError(f"cannot load CA certificate {ca}: {e.reason or e}") from e
    except OSError as e:
        raise PKIError(f"cannot read CA certificate {ca}: {e.strerror or e}") from e
