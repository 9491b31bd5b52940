"""TLS contexts for mutual TLS between agents and the control plane, and reading the peer's node id."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
