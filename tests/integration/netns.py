"""Another host, made of a network namespace joined to this one by a veth pair (root only)."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Host:
    netns: str
    address: str  # the host's address inside its namespace
    gateway: str  # this side of the link: where the host reaches us


def ip(*args: str) -> None:
    """`ip ARGS`, raising CalledProcessError (its output attached) when it fails."""
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextmanager
def host(subnet: int) -> Iterator[Host]:
    """10.250.<subnet>.0/30: .1 on our side, .2 in the namespace. Removed on exit, with its link."""
    tag = secrets.token_hex(3)
    ns, here, there = f"llmgw-{tag}", f"lg{tag}a", f"lg{tag}b"
    gw, addr = f"10.250.{subnet}.1", f"10.250.{subnet}.2"
    ip("netns", "add", ns)
    try:
        ip("link", "add", here, "type", "veth", "peer", "name", there)
        ip("link", "set", there, "netns", ns)
        ip("addr", "add", f"{gw}/30", "dev", here)
        ip("link", "set", here, "up")
        ip("-n", ns, "addr", "add", f"{addr}/30", "dev", there)
        ip("-n", ns, "link", "set", there, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "route", "add", "default", "via", gw)
        yield Host(netns=ns, address=addr, gateway=gw)
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
