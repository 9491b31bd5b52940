"""The agent's whole report from a fixture host, and a fabric typo reported at start with the adapter named."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from bench.addresses import loopback

from llmgw.agent.agent import Agent
from llmgw.config.agent import AgentConfig
from llmgw.core.clock import FakeClock
from llmgw.pki.ca import init_ca, issue
from llmgw.wire.messages import NodeReport

HOST_A = loopback()  # the address this module's tests name (bench/addresses.py)

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"


def config(tmp: Path, host: str, fabrics: list[dict[str, object]]) -> AgentConfig:
    pki = tmp / "pki"
    init_ca(pki)
    issue(pki, "node07")
    return AgentConfig.model_validate(
        {
            "control_planes": ["https://127.0.0.1:1"],
            "tls": {"ca": str(pki / "ca.crt"), "cert": str(pki / "node07.crt"), "key": str(pki / "node07.key")},
            "node_id": "node07",
            "address": HOST_A,
            "host_root": str(HOSTS / host),
            "gpu_inventory": str(HOSTS / host / "gpu-inventory.yaml"),
            "weights_dir": str(tmp / "weights"),
            "state_dir": str(tmp / "state"),
            "fabrics": fabrics,
            "probe_engines": ["sim"],
            "peer_port": 0,
            "weights_budget": "1Gi",
        }
    )


async def reported(cfg: AgentConfig) -> NodeReport:
    """What an agent started with `cfg` reports first; stopped again after."""
    a = Agent(cfg, FakeClock())
    await a.start()
    try:
        return await a.report()
    finally:
        await a.close()


async def test_report_describes_the_host(tmp_path: Path) -> None:
    a = Agent(config(tmp_path, "h100x8-ib2", [{"name": "ib-a", "adapters": ["mlx5_0", "mlx5_1"]}]), FakeClock())
    await a.start()
    try:
        r = await a.report()
    finally:
        await a.close()
    assert r.node_id == "node07" and r.address == HOST_A
    assert len(r.hardware.gpus) == 8 and {g.gpu_class for g in r.hardware.gpus} == {"H100-80G"}
    assert [f.name for f in r.fabrics] == ["ib-a"] and r.fabrics[0].adapters == ["mlx5_0", "mlx5_1"]
    assert r.engines_probed and [e.name for e in r.engines] == ["sim"]
    assert r.hardware.disk is not None  # the weights directory exists from the start
    assert r.problems == []
    (d,) = r.weights_dirs
    assert d.path == str(tmp_path / "weights") and d.fs_type and d.free_bytes > 0 and d.budget_bytes == 2**30
    assert r.weights == [] and r.fetches == [] and r.peer_port == 0


async def test_a_node_serves_held_weights_on_its_peer_port(tmp_path: Path) -> None:
    """The peer listener starts with the agent, on the node's address, and is said in every report."""
    from tests.harness import free_port

    cfg = config(tmp_path, "h100x8-ib2", []).model_copy(update={"peer_port": free_port(), "address": "127.0.0.1"})
    a = Agent(cfg, FakeClock())
    await a.start()
    try:
        r = await a.report()
        import socket

        with socket.create_connection(("127.0.0.1", cfg.peer_port), timeout=5):
            pass
    finally:
        await a.close()
    assert r.peer_port == cfg.peer_port


async def test_fabric_typo_is_reported_at_start_with_the_adapter(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config(tmp_path, "h100x8-ib2", [{"name": "ib-a", "adapters": ["mlx5_0", "mlx5_3"]}])
    a = Agent(cfg, FakeClock())
    with caplog.at_level(logging.ERROR):
        await a.start()
    try:
        assert any("mlx5_3" in m and "ib-a" in m for m in caplog.messages), caplog.messages
        r = await a.report()
    finally:
        await a.close()
    assert r.fabrics[0].adapters == ["mlx5_0"]  # the absent adapter is not advertised
    assert any(p.code == "FabricAdapterMissing" and "mlx5_3" in p.message for p in r.problems)


async def test_an_adapter_in_init_is_not_advertised(tmp_path: Path) -> None:
    cfg = config(tmp_path, "h100x8-ib-init", [{"name": "ib-a", "adapters": ["mlx5_0", "mlx5_1"]}])
    r = await reported(cfg)
    assert r.fabrics[0].adapters == ["mlx5_0"]
    assert any(p.code == "FabricPortNotActive" and "mlx5_1" in p.message and "INIT" in p.message for p in r.problems)
    assert sum(g.faulty for g in r.hardware.gpus) == 1
    assert any(p.code == "GPUFaulty" and "Xid 79" in p.message for p in r.problems)


@pytest.mark.real  # processes (tests/tiers.py)
async def test_a_build_an_engine_runs_from_counts_as_in_use_read_from_proc(tmp_path: Path) -> None:
    """What keeps an old build on disk is what running engines really execute (their command lines), including
    one found left running by the previous agent and not adopted yet, and any path agent.yaml names."""
    import shutil
    import subprocess

    from llmgw.agent.supervisor.adopt import Running
    from llmgw.wire.messages import ShardSpec

    build = tmp_path / "state" / "engines" / "llamacpp" / "b1-cpu-x86_64" / "llama-b1"
    build.mkdir(parents=True)
    server = build / "llama-server"
    shutil.copy2("/bin/sleep", server)
    proc = subprocess.Popen([str(server), "30"])
    try:
        cfg = AgentConfig.model_validate({**config(tmp_path, "h100x8-ib2", []).model_dump(),
                                          "engines": {"vllm": {"path": "/opt/vllm/bin/vllm"}}})
        a = Agent(cfg, FakeClock())
        spec = ShardSpec(replica_id="r", model="m", engine="llamacpp", source="/m", rank=0, world_size=1)
        a._found = {("r", 0): Running(pid=proc.pid, spec=spec, pid_path=tmp_path / "pid")}
        used = a._in_use()
        assert server in used and Path("/opt/vllm/bin/vllm") in used, used
    finally:
        proc.kill()
        proc.wait()


async def test_a_held_url_is_reported_however_many_local_files_there_are(tmp_path: Path) -> None:
    """The report's weights are bounded (1024), yet a node whose weights_dirs hold more files still reports the files
    it fetched: otherwise it is never seen as a holder and its fabric's nodes wait for it for good."""
    from tests.agent.weights.kit import hold

    url = "https://origin.example/models/model.gguf"
    shared = tmp_path / "shared"
    shared.mkdir()
    for i in range(1100):
        (shared / f"shard-{i:05d}.safetensors").write_bytes(b"x")
    hold(tmp_path / "weights", url, b"GGUF" + bytes(100))
    cfg = config(tmp_path, "h100x8-ib2", []).model_copy(update={"weights_dirs": [str(shared)]})
    r = await reported(cfg)
    assert url in r.weights and len(r.weights) == 1024, f"the fetched file is missing from {len(r.weights)} entries"
