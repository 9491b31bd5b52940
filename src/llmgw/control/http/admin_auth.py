"""Who may use the management API: the holder of the operator token, from a client that is not a browser page.

The token lives in a file only its owner can read (`admin_token_file`, created at the first start). `ctl` and the
router workers read it; a web page cannot. Host and Origin are checked as well, so a page on another site, or a
name rebound to 127.0.0.1, is refused before the token is even looked at, and a write must be JSON, which a
browser cannot send across sites without asking first.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from llmgw.core.errors import ConfigError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# liveness, and the dashboard's empty shell and its script and style: they say nothing and change nothing (the
# page's data comes from /admin/view, which needs the token like everything else)
OPEN_PATHS = frozenset({"/health", "/admin", "/admin/app.js", "/admin/style.css", "/admin/icon.svg"})


def load_or_create_token(path: Path) -> str:
    """The operator token in `path`, made (0600) if there is none. A token others can read is refused."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        token = secrets.token_urlsafe(32)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, (token + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        log.info("created the operator token in %s (ctl reads it; keep it readable by operators only)", path)
        return token
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ConfigError(str(path), [f"the operator token is readable by others (mode {mode:o}): chmod 600 it"])
    token = path.read_text().strip()
    if len(token) < 16:
        raise ConfigError(str(path), ["the operator token is shorter than 16 characters"])
    return token


def read_token(path: Path) -> str:
    """For clients (ctl, router workers): the token, or a ConfigError saying what to do."""
    try:
        return path.read_text().strip()
    except OSError as e:
        raise ConfigError(str(path), [f"cannot read the operator token: {e.strerror or e}"]) from None


def _host_of(value: str) -> str:
    return (urlsplit(f"//{value}").hostname or "").lower()


def allowed_hosts(listen_host: str, extra: Iterable[str]) -> frozenset[str]:
    hosts = {"127.0.0.1", "localhost", "::1", *(h.lower() for h in extra)}
    if listen_host not in ("", "0.0.0.0", "::"):
        hosts.add(listen_host.lower().strip("[]"))
    return frozenset(hosts)


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def guard(token: str, hosts: frozenset[str], any_ip: bool) -> Middleware:
    """Middleware: Host, Origin, the token, and JSON bodies for writes. `any_ip`: the listener is on every
    interface, so any IP literal is a host the operator may use (a DNS name still has to be configured)."""
    expected = f"Bearer {token}".encode()

    def host_ok(host: str) -> bool:
        return host in hosts or (any_ip and _is_ip(host))

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = _host_of(request.headers.get("Host", ""))
        if not host_ok(host):
            return _deny(403, f"Host {host or '(none)'!r} is not this management API's (see admin_hosts)")
        origin = request.headers.get("Origin")
        if origin is not None and not host_ok((urlsplit(origin).hostname or "").lower()):
            return _deny(403, "cross-origin requests are refused")
        if request.path not in OPEN_PATHS:
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, expected):
                return _deny(401, "the operator token is required: Authorization: Bearer <admin_token_file's token>")
        if request.method in ("POST", "PUT", "PATCH", "DELETE") and request.can_read_body:
            if request.content_type != "application/json":
                return _deny(415, "a request body must be application/json")
        return await handler(request)

    return check


def _deny(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
