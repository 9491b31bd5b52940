"""What a node may claim about itself. Pure: the agent listener asks, and refuses with the answer.

A node's address and port range decide where the router will later send users' requests (the endpoint is the
assigned address and port). So a node may only name an address that is demonstrably its own, and never a port of
the control plane's own listeners on that address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _ip(text: str) -> IPAddress | None:
    if "%" in text:
        return None  # a zone is not part of an address another host can reach
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def address_problem(
    address: str, peer: str | None, cert_ips: Sequence[str], networks: Sequence[IPNetwork]
) -> str | None:
    """None if `address` is the node's own: the address its heartbeat came from, an IP address its certificate
    names, or one inside a configured node network. Otherwise why not."""
    ip = _ip(address)
    if ip is None:
        return f"address {address[:64]!r} is not an IP address"
    if ip.is_unspecified or ip.is_multicast:
        return f"address {ip} cannot be an engine's address"
    if peer is not None and _ip(peer) == ip:
        return None
    if any(_ip(c) == ip for c in cert_ips):
        return None
    if any(ip in n for n in networks):
        return None
    return (
        f"address {ip} is not this node's: its heartbeat came from {peer or 'an unknown address'}, its certificate "
        f"names {', '.join(cert_ips) or 'no IP address'}, and it is in no configured node_networks"
    )


def ports_problem(address: str, low: int, high: int, listeners: Sequence[tuple[str, int]]) -> str | None:
    """None unless [low, high] on `address` covers a port the control plane itself listens on there."""
    ip = _ip(address)
    for host, port in listeners:
        if not low <= port <= high:
            continue
        lip = _ip(host) if host else None
        if lip is None or lip.is_unspecified or lip == ip or (ip is not None and ip.is_loopback and lip.is_loopback):
            return f"port range {low}-{high} on {address} includes the control plane's own listener {host}:{port}"
    return None


def parse_networks(cidrs: Sequence[str]) -> list[IPNetwork]:
    return [ipaddress.ip_network(c, strict=False) for c in cidrs]
