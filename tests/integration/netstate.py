"""Which addresses have listening TCP sockets, read from /proc/net/tcp like `ss -ltn` would."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

LISTEN = "0A"


def listening_ports(address: str) -> set[int]:
    want = struct.unpack("<I", socket.inet_aton(address))[0]
    ports: set[int] = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if state != LISTEN:
            continue
        host_hex, port_hex = local.split(":")
        if int(host_hex, 16) == want:
            ports.add(int(port_hex, 16))
    return ports
