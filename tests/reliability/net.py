"""Several hosts on one bridge: each a network namespace with its own address, joined to this one (the control
plane's host) by a veth pair on a bridge that holds the gateway address. A partition is a firewall rule inside a
host's namespace (iptables), so only that host is cut off, as a switch port failing would. Root only."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests.integration.netns import ip
from tests.tools import unavailable


def need_network_tools() -> None:
    missing = [t for t in ("ip", "iptables") if shutil.which(t) is None]
    why = f"reliability tests need root and {', '.join(missing)} (apt-get install iproute2 iptables)" if missing \
        else "reliability tests need root"
    if os.geteuid() == 0 and not missing:
        return
    unavailable(why)


@dataclass
class Hosts:
    subnet: int
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    names: list[str] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        return f"10.252.{self.subnet}.1"

    @property
    def bridge(self) -> str:
        return f"lb{self.tag}"

    def netns(self, i: int) -> str:
        return f"llmgw-r{self.tag}-{i}"

    def address(self, i: int) -> str:
        return f"10.252.{self.subnet}.{10 + i}"

    def add(self) -> int:
        i = len(self.names)
        ns, here, there = self.netns(i), f"lr{self.tag}{i}a", f"lr{self.tag}{i}b"
        ip("netns", "add", ns)
        self.names.append(ns)
        ip("link", "add", here, "type", "veth", "peer", "name", there)
        ip("link", "set", here, "master", self.bridge)
        ip("link", "set", here, "up")
        ip("link", "set", there, "netns", ns)
        ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", there)
        ip("-n", ns, "link", "set", there, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        return i

    def cut(self, i: int) -> None:
        """Host i can no longer reach, or be reached from, the control plane's host (its other links stay)."""
        for chain, way in (("OUTPUT", "-d"), ("INPUT", "-s")):
            ip("netns", "exec", self.netns(i), "iptables", "-I", chain, way, self.gateway, "-j", "DROP")

    def heal(self, i: int) -> None:
        for chain, way in (("OUTPUT", "-d"), ("INPUT", "-s")):
            ip("netns", "exec", self.netns(i), "iptables", "-D", chain, way, self.gateway, "-j", "DROP")


@contextmanager
def hosts(subnet: int, count: int) -> Iterator[Hosts]:
    """10.252.<subnet>.1 on a bridge here; hosts at .10, .11, ... each in its own namespace. Removed on exit."""
    h = Hosts(subnet)
    ip("link", "add", h.bridge, "type", "bridge")
    try:
        ip("addr", "add", f"{h.gateway}/24", "dev", h.bridge)
        ip("link", "set", h.bridge, "up")
        for _ in range(count):
            h.add()
        yield h
    finally:
        for ns in h.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # its veth end goes with it
        subprocess.run(["ip", "link", "del", h.bridge], capture_output=True)
