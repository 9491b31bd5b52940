"""Where a redirect may send a transfer from an origin (weights, engine archives). Within the origin anything
goes; elsewhere only over http(s), never down to plain http, and only to a public address unless agent.yaml's
`redirects_allowed` names the place. A name is judged as it is resolved (`GuardedResolver`), so what is checked is
what is connected to."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from llmgw.config.places import split_place

MAX_HOPS = 10
STATUSES = frozenset({301, 302, 303, 307, 308})
IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def _ip(host: str) -> IP | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def public(ip: IP) -> bool:
    """Reachable from anywhere: not loopback, private, link-local, shared (100.64/10), reserved or multicast."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _place(u: URL) -> tuple[str, int | None]:
    return (u.host or "").lower(), u.port


@dataclass(frozen=True)
class Redirects:
    """The places, besides public addresses, a redirect may lead to: "host", "host:port", "[v6]:port" or a network
    ("10.0.0.0/8", "127.0.0.1/32")."""

    allowed: tuple[str, ...] = ()

    def allows(self, host: str, port: int | None, ip: IP | None = None) -> bool:
        host = host.lower().strip("[]")
        ip = ip if ip is not None else _ip(host)
        for entry in self.allowed:
            if "/" in entry:
                if ip is not None and ip in ipaddress.ip_network(entry, strict=False):
                    return True
                continue
            name, port_of = split_place(entry)
            if name == host and port_of in (None, port):
                return True
        return False

    def refusal(self, here: URL, there: URL) -> str:
        """Why a redirect from `here` to `there` is not followed; "" when it may be (a name's addresses are
        judged again as it is resolved)."""
        if there.scheme not in ("http", "https") or not there.host:
            return "not http(s)"
        if here.scheme == "https" and there.scheme == "http":
            return "from https to plain http"
        if _place(here) == _place(there) or self.allows(there.host, there.port):
            return ""
        ip = _ip(there.host)
        if ip is not None and not public(ip):
            return "a private address (agent.yaml's redirects_allowed can allow it)"
        return ""


PUBLIC_ONLY = Redirects()  # no place allowed besides public addresses


class GuardedResolver(AbstractResolver):
    """The default resolver, refusing a name that resolves to an address that is not public, unless it is the
    origin itself (the operator named it) or an allowed place. `refused` keeps why, for the transfer's words."""

    def __init__(self, origin: URL, rule: Redirects) -> None:
        self._inner = DefaultResolver()
        self._origin = ((origin.host or "").lower(), origin.port)
        self._rule = rule
        self.refused = ""

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET,
                      ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        if (host.lower(), port) == self._origin or self._rule.allows(host, port):
            return found
        for r in found:
            ip = _ip(str(r["host"]))
            if ip is None or not (public(ip) or self._rule.allows(host, port, ip)):
                self.refused = f"{host}, which resolves to {r['host']}, a private address (agent.yaml's " \
                               "redirects_allowed can allow it)"
                raise OSError(self.refused)
        return found

    async def close(self) -> None:
        await self._inner.close()


def words(where: Any) -> str:
    """A URL for a message: bounded, its credentials never shown."""
    u = where if isinstance(where, URL) else URL(str(where))
    return str(u.with_user(None))[:200] if u.is_absolute() else str(u)[:200]
