"""Which TCP addresses a process (and its process group's other members) listens on, read from /proc."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

LISTEN = "0A"


def _inodes(pid: int) -> dict[int, set[str]]:
    """Socket inodes held by each member of `pid`'s process group."""
    out: dict[int, set[str]] = {}
    pgid = os.getpgid(pid)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getpgid(int(proc.name)) != pgid:
                continue
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    out.setdefault(int(proc.name), set()).add(target[8:-1])
        except OSError:
            continue
    return out


def _address(hex_addr: str) -> tuple[str, int]:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    # /proc/net/tcp writes each 32-bit word in the host's (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def listening(pid: int) -> dict[int, set[tuple[str, int]]]:
    """(address, port) of every listening TCP socket held by each member of `pid`'s process group, by pid."""
    held = _inodes(pid)
    rows: dict[str, tuple[str, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == LISTEN:
                rows[f[9]] = _address(f[1])
    return {p: {rows[i] for i in inodes if i in rows} for p, inodes in held.items() if inodes & rows.keys()}


def gate_and_engine(pid: int) -> tuple[set[tuple[str, int]], set[str]]:
    """What the shard's own process (its gate) listens on, and the addresses the rest of its group (the engine)
    listens on."""
    by_pid = listening(pid)
    engine = {host for p, socks in by_pid.items() if p != pid for host, _ in socks}
    return by_pid.get(pid, set()), engine
