"""Other hosts for tests, made of network namespaces: the one builder every test that needs a second machine uses.

A `Lan` is a subnet handed out by bench/addresses.py on a bridge of this machine, which holds the subnet's first
address (the gateway: where the hosts reach this machine, and the control plane on it). Each host is a network
namespace joined to the bridge by a veth pair, at an address of the subnet.
A partition is a firewall rule inside one host's namespace, so only that host is cut off, as a switch port failing
would. Root only; everything made is removed when the `lan` block ends."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bench.addresses import Subnet, subnet

from tests.tools import unavailable


def ip(*args: str) -> None:
    """`ip ARGS`, raising CalledProcessError (its output attached) when it fails."""
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def need_network_tools(firewall: bool = False) -> None:
    """Skip (or, where CI requires the tools, fail) unless this runs as root with `ip` (and `iptables`)."""
    missing = [t for t in ("ip", "iptables")[: 2 if firewall else 1] if shutil.which(t) is None]
    if os.geteuid() == 0 and not missing:
        return
    unavailable(f"hosts of network namespaces need root and {', '.join(missing)} (apt-get install iproute2 iptables)"
                if missing else "hosts of network namespaces need root")


@dataclass(frozen=True)
class Host:
    netns: str
    address: str  # the host's address inside its namespace
    gateway: str  # this machine's side of the link: where the host reaches us


@dataclass
class Lan:
    net: Subnet = field(default_factory=subnet)
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: list[Host] = field(default_factory=list)
    up: bool = False

    @property
    def gateway(self) -> str:
        return self.net.gateway

    @property
    def bridge(self) -> str:
        return f"lb{self.tag}"

    def open(self) -> Lan:
        ip("link", "add", self.bridge, "type", "bridge")
        self.up = True
        ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        return self

    def add(self, number: int | None = None, netns: str | None = None, route: bool = False) -> Host:
        """A host at <subnet>.`number` (default: .10, .11, ... in order), in namespace `netns` (default: a new
        name); with `route`, its default route goes through the gateway (without, it reaches its subnet alone)."""
        i = len(self.hosts)
        h = Host(netns or f"llmgw-{self.tag}-{i}", self.net.at(10 + i if number is None else number), self.gateway)
        here, there = f"lv{self.tag}{i}a", f"lv{self.tag}{i}b"
        ip("netns", "add", h.netns)
        self.hosts.append(h)
        ip("link", "add", here, "type", "veth", "peer", "name", there)
        ip("link", "set", here, "master", self.bridge)
        ip("link", "set", here, "up")
        ip("link", "set", there, "netns", h.netns)
        ip("-n", h.netns, "addr", "add", f"{h.address}/24", "dev", there)
        ip("-n", h.netns, "link", "set", there, "up")
        ip("-n", h.netns, "link", "set", "lo", "up")
        if route:
            ip("-n", h.netns, "route", "add", "default", "via", self.gateway)
        return h

    def cut(self, h: Host) -> None:
        """Host `h` can no longer reach, or be reached from, this machine (its other links stay)."""
        for chain, way in (("OUTPUT", "-d"), ("INPUT", "-s")):
            ip("netns", "exec", h.netns, "iptables", "-I", chain, way, self.gateway, "-j", "DROP")

    def heal(self, h: Host) -> None:
        for chain, way in (("OUTPUT", "-d"), ("INPUT", "-s")):
            ip("netns", "exec", h.netns, "iptables", "-D", chain, way, self.gateway, "-j", "DROP")

    def close(self) -> None:
        for h in self.hosts:
            subprocess.run(["ip", "netns", "del", h.netns], capture_output=True)  # its veth end goes with it
        self.hosts.clear()
        if self.up:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            self.up = False


@contextmanager
def lan(count: int = 0) -> Iterator[Lan]:
    """A subnet of its own on a bridge here, with `count` hosts on it; removed on exit."""
    net = Lan()
    try:
        net.open()
        for _ in range(count):
            net.add()
        yield net
    finally:
        net.close()


@contextmanager
def host() -> Iterator[Host]:
    """One other host, on a subnet of its own, its default route through this machine."""
    with lan() as net:
        yield net.add(route=True)
