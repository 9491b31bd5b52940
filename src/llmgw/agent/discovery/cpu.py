"""The CPU from /proc/cpuinfo: model, logical CPU count and the vector extensions inference engines care about."""

from __future__ import annotations

from llmgw.agent.discovery.hostroot import HostRoot
from llmgw.wire.messages import CPU


def parse_cpuinfo(text: str) -> CPU:
    cores = 0
    model = ""
    flags: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            cores += 1
        elif key == "model name" and not model:
            model = value
        # x86 says "flags", arm64 says "Features"; the first processor speaks for all of them
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return CPU(
        model=model,
        cores=cores,
        avx2="avx2" in flags,
        avx512f="avx512f" in flags,
        amx="amx_tile" in flags,
    )


def probe_cpu(root: HostRoot) -> CPU:
    text = root.read_text("proc/cpuinfo")
    return parse_cpuinfo(text) if text is not None else CPU()
