from __future__ import annotations

from pathlib import Path

from llmgw.agent.discovery import HostRoot
from llmgw.agent.discovery.system import parse_os_release, probe_arch, probe_disk, probe_os

from .hosts import host


def test_os_is_pretty_name() -> None:
    assert probe_os(host("vm-noavx2")) == "Debian GNU/Linux 12 (bookworm)"
    assert probe_os(host("h100x8-ib2")) == "Ubuntu 22.04.4 LTS"
    assert probe_os(host("cpu-avx2")) == "Rocky Linux 9.3 (Blue Onyx)"


def test_os_without_pretty_name_falls_back_to_name_and_version() -> None:
    assert parse_os_release("NAME='Alpine Linux'\nVERSION=3.19\n") == "Alpine Linux 3.19"


def test_os_unknown_when_no_file(tmp_path: Path) -> None:
    assert probe_os(HostRoot(tmp_path)) == ""


def test_arch_from_kernel_when_present() -> None:
    assert probe_arch(host("h100x8-ib2"), default_arch="aarch64") == "x86_64"


def test_arch_from_caller_when_kernel_does_not_say() -> None:
    assert probe_arch(host("vm-noavx2"), default_arch="x86_64") == "x86_64"


def test_disk_measures_real_path(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "weights")
    disk = probe_disk(tmp_path / "link")
    assert disk is not None
    assert disk.path == str((tmp_path / "weights").resolve())
    assert disk.total_bytes > 0
    assert 0 <= disk.free_bytes <= disk.total_bytes


def test_disk_none_when_dir_missing_or_unset(tmp_path: Path) -> None:
    assert probe_disk(tmp_path / "not-yet") is None
    assert probe_disk(None) is None
