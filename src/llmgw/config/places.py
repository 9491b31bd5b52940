"""Where a node's downloads may be redirected (agent.yaml's redirects_allowed): the entries' form, checked when the
configuration loads; agent/redirects.py applies the rule."""

from __future__ import annotations

import ipaddress
import re

PLACE = re.compile(r"^(?P<host>[a-z0-9]([a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])(:(?P<port>[0-9]{1,5}))?$")


def split_place(entry: str) -> tuple[str, int | None]:
    """("host", port or None) of "host", "host:port", "[v6]" or "[v6]:port"; ("", None) when it is none of them."""
    m = PLACE.match(entry.strip().lower())
    if m is None:
        return "", None
    return m["host"].strip("[]"), int(m["port"]) if m["port"] else None


def check_allowed(entries: list[str]) -> list[str]:
    """agent.yaml's redirects_allowed, each entry a network or a host[:port]; raises ValueError naming a bad one."""
    for entry in entries:
        if "/" in entry:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not a network (such as 10.0.0.0/8)") from None
            continue
        name, port = split_place(entry)
        if not name or (port is not None and not 0 < port < 65536):
            raise ValueError(f"{entry!r} is not a host, host:port ([v6]:port) or network")
    return entries
