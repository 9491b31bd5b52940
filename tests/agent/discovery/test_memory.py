from __future__ import annotations

from pathlib import Path

from llmgw.agent.discovery import HostRoot
from llmgw.agent.discovery.memory import Memory, parse_meminfo, probe_memory

from .hosts import host


def test_parse_converts_kib_to_bytes() -> None:
    mem = parse_meminfo("MemTotal:       16384 kB\nMemFree:  100 kB\nMemAvailable:    8192 kB\nHugePages_Total: 0\n")
    assert mem == Memory(total_bytes=16384 * 1024, available_bytes=8192 * 1024)


def test_vm_has_8_gib() -> None:
    mem = probe_memory(host("vm-noavx2"))
    assert mem.total_bytes == 8148188 * 1024
    assert mem.available_bytes == 7512344 * 1024
    assert round(mem.total_bytes / 2**30) == 8


def test_h100_box_has_2_tib() -> None:
    assert round(probe_memory(host("h100x8-ib2")).total_bytes / 2**40) == 2


def test_missing_meminfo_is_unknown(tmp_path: Path) -> None:
    assert probe_memory(HostRoot(tmp_path)) == Memory(total_bytes=0, available_bytes=0)
