"""What a node reports holding decides who copies from it: a held URL that drops out of the report leaves the
nodes that wait for it waiting for good."""

from __future__ import annotations

import hashlib
from pathlib import Path

from llmgw.agent.agent import Agent
from llmgw.agent.weights import local
from llmgw.config.agent import AgentConfig
from llmgw.core.clock import FakeClock
from llmgw.pki.ca import init_ca, issue

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"
URL = "https://origin.example/models/model.gguf"


async def test_a_held_url_is_reported_however_many_local_files_there_are(tmp_path: Path) -> None:
    """report.weights is `visible(dirs)[:1024]`, sorted: local paths ("/...") sort before URLs ("http..."), so a
    node whose weights_dirs hold 1024+ files (a shared model tree, an HF cache) never reports the files it
    fetched. The control plane then never sees it as a holder: the nodes of its fabric told to wait_for it wait
    forever, and no one copies from it."""
    pki = tmp_path / "pki"
    init_ca(pki)
    issue(pki, "node07")
    shared = tmp_path / "shared"
    shared.mkdir()
    for i in range(1100):
        (shared / f"shard-{i:05d}.safetensors").write_bytes(b"x")
    data = b"GGUF" + bytes(100)
    target = local.target_for(tmp_path / "weights", URL)
    target.parent.mkdir(parents=True)
    target.write_bytes(data)
    local.record(target.parent, URL, len(data), hashlib.sha256(data).hexdigest())
    cfg = AgentConfig.model_validate({
        "control_planes": ["https://127.0.0.1:1"],
        "tls": {"ca": str(pki / "ca.crt"), "cert": str(pki / "node07.crt"), "key": str(pki / "node07.key")},
        "node_id": "node07", "address": "127.0.0.77",
        "host_root": str(HOSTS / "h100x8-ib2"), "gpu_inventory": str(HOSTS / "h100x8-ib2" / "gpu-inventory.yaml"),
        "weights_dir": str(tmp_path / "weights"), "weights_dirs": [str(shared)],
        "state_dir": str(tmp_path / "state"), "probe_engines": ["sim"], "peer_port": 0,
    })
    a = Agent(cfg, FakeClock())
    await a.start()
    try:
        r = await a.report()
    finally:
        await a.close()
    assert URL in r.weights, f"the fetched file is missing from a report of {len(r.weights)} entries"
