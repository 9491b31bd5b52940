"""The fixture host trees, named by hardware shape."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.discovery import HostRoot

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"


def host(name: str) -> HostRoot:
    path = HOSTS / name
    assert path.is_dir(), f"no fixture host tree {path}"
    return HostRoot(path)


def inventory(name: str) -> Path:
    return HOSTS / name / "gpu-inventory.yaml"
