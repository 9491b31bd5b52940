from __future__ import annotations

from pathlib import Path

from llmgw.agent.discovery.hostroot import HostRoot, natural_key

from .hosts import host


def test_reads_relative_and_absolute_host_paths_alike() -> None:
    root = host("cpu-avx2")
    text = root.read_text("/etc/os-release")
    assert text is not None and "Rocky Linux" in text
    assert root.read_text("etc/os-release") == text


def test_absent_file_and_directory_read_as_none() -> None:
    root = host("cpu-avx2")
    assert root.read_text("proc/does-not-exist") is None
    assert root.read_text("proc") is None  # a directory is not a value
    assert root.read_text("etc/os-release/below-a-file") is None


def test_listdir_is_natural_order_and_empty_when_absent(tmp_path: Path) -> None:
    for name in ("mlx5_10", "mlx5_2", "mlx5_0"):
        (tmp_path / name).mkdir()
    root = HostRoot(tmp_path)
    assert root.listdir("/") == ["mlx5_0", "mlx5_2", "mlx5_10"]
    assert root.listdir("sys/class/infiniband") == []


def test_constructing_does_no_io() -> None:
    root = HostRoot("/nonexistent/host")
    assert root.path("/proc/meminfo") == Path("/nonexistent/host/proc/meminfo")
    assert not root.exists("proc/meminfo")


def test_natural_key_orders_numbers_by_value() -> None:
    assert sorted(["p10", "p9", "p1"], key=natural_key) == ["p1", "p9", "p10"]
