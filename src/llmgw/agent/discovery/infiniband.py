"""RDMA adapters and their ports from /sys/class/infiniband (InfiniBand and RoCE alike)."""

from __future__ import annotations

import re

from llmgw.agent.discovery.hostroot import HostRoot
from llmgw.wire.messages import IBAdapter, IBPort

IB_CLASS_DIR = "sys/class/infiniband"
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def parse_port_state(text: str) -> str:
    """ "4: ACTIVE" -> "ACTIVE"; the number is the kernel's enum, the word is what people read."""
    _num, sep, word = text.strip().partition(":")
    return (word if sep else text).strip().upper() or "UNKNOWN"


def parse_rate_gbps(text: str) -> float:
    """ "400 Gb/sec (4X NDR)" -> 400.0; 0.0 when the kernel gives no rate (a port that is down)."""
    m = _RATE.match(text)
    return float(m.group(1)) if m else 0.0


def probe_port(root: HostRoot, adapter: str, port: str) -> IBPort | None:
    if not port.isdigit():
        return None
    base = f"{IB_CLASS_DIR}/{adapter}/ports/{port}"
    state = root.read_text(f"{base}/state")
    if state is None:
        return None
    rate = root.read_text(f"{base}/rate")
    return IBPort(port=int(port), state=parse_port_state(state), rate_gbps=parse_rate_gbps(rate or ""))


def probe_adapters(root: HostRoot) -> list[IBAdapter]:
    """Every adapter with its ports; no infiniband class directory means no adapters."""
    adapters = []
    for name in root.listdir(IB_CLASS_DIR):
        found = (probe_port(root, name, port) for port in root.listdir(f"{IB_CLASS_DIR}/{name}/ports"))
        ports = [p for p in found if p is not None]
        adapters.append(IBAdapter(name=name, ports=ports))
    return adapters
