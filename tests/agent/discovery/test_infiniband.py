from __future__ import annotations

from pathlib import Path

from llmgw.agent.discovery import HostRoot
from llmgw.agent.discovery.infiniband import parse_port_state, parse_rate_gbps, probe_adapters
from llmgw.wire.messages import IBAdapter, IBPort

from .hosts import host

NDR_ACTIVE = IBPort(port=1, state="ACTIVE", rate_gbps=400.0)


def test_two_active_ndr_adapters() -> None:
    assert probe_adapters(host("h100x8-ib2")) == [
        IBAdapter(name="mlx5_0", ports=[NDR_ACTIVE]),
        IBAdapter(name="mlx5_1", ports=[NDR_ACTIVE]),
    ]


def test_port_stuck_in_init_is_seen_as_init() -> None:
    adapters = probe_adapters(host("h100x8-ib-init"))
    assert [(a.name, [p.state for p in a.ports]) for a in adapters] == [("mlx5_0", ["ACTIVE"]), ("mlx5_1", ["INIT"])]


def test_one_hdr_adapter() -> None:
    assert probe_adapters(host("l40sx4-pcie-pairs")) == [
        IBAdapter(name="mlx5_0", ports=[IBPort(port=1, state="ACTIVE", rate_gbps=200.0)])
    ]


def test_no_infiniband_directory_means_no_adapters() -> None:
    assert probe_adapters(host("cpu-avx2")) == []


def test_port_without_rate_and_odd_entries(tmp_path: Path) -> None:
    ports = tmp_path / "sys/class/infiniband/mlx5_7/ports"
    (ports / "1").mkdir(parents=True)
    (ports / "1/state").write_text("1: DOWN\n")
    (ports / "2").mkdir()  # no state file: not a port we can describe
    assert probe_adapters(HostRoot(tmp_path)) == [
        IBAdapter(name="mlx5_7", ports=[IBPort(port=1, state="DOWN", rate_gbps=0.0)])
    ]


def test_parsers() -> None:
    assert parse_port_state("4: ACTIVE\n") == "ACTIVE"
    assert parse_port_state("2: INIT") == "INIT"
    assert parse_port_state("armed") == "ARMED"
    assert parse_rate_gbps("400 Gb/sec (4X NDR)") == 400.0
    assert parse_rate_gbps("56 Gb/sec (4X FDR)") == 56.0
    assert parse_rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate_gbps("") == 0.0
