"""Memory from /proc/meminfo, in bytes."""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.agent.discovery.hostroot import HostRoot


@dataclass(frozen=True)
class Memory:
    total_bytes: int = 0  # 0 = unknown: the kernel did not say
    available_bytes: int = 0


def parse_meminfo(text: str) -> Memory:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or not fields or not fields[0].isdigit():
            continue
        # meminfo says "kB" and means KiB
        scale = 1024 if len(fields) > 1 and fields[1].lower() == "kb" else 1
        values[key.strip()] = int(fields[0]) * scale
    return Memory(total_bytes=values.get("MemTotal", 0), available_bytes=values.get("MemAvailable", 0))


def probe_memory(root: HostRoot) -> Memory:
    text = root.read_text("proc/meminfo")
    return parse_meminfo(text) if text is not None else Memory()
