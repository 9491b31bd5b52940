"""What the hub directory tests share: the stand-in hub serving a sample model, the plan the control plane would
send for it, and a fetcher that may follow the hub's redirect to its CDN (on loopback here)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from llmgw.agent.redirects import Redirects
from llmgw.agent.weights.fetcher import Fetcher
from llmgw.sim.hub import HubHandle, HubRepo, start_hub
from llmgw.sim.hub_repo import write_sample_model
from llmgw.wire.hub import HubFile, pinned_source, resolve_base
from llmgw.wire.messages import WeightsPlan
from tests.agent.weights.kit import fetcher
from tests.sim.hubs import REPO, SMALL_LFS, TOKEN

__all__ = ["REPO", "TOKEN", "hub_fetcher", "plan_for", "serve_hub"]

CDN = Redirects(("127.0.0.1",))  # the stand-in's CDN is another port on loopback: allowed as agent.yaml would


async def serve_hub(root: Path, gated: bool = False) -> AsyncIterator[HubHandle]:
    """A sample model (three 300 kB safetensors shards, config, tokenizer, ...) on a stand-in hub."""
    model = write_sample_model(root, shards=3, shard_bytes=300_000, bin_too=False)
    hub = await start_hub([HubRepo.from_dir(REPO, model, lfs_threshold=SMALL_LFS, gated=gated)], tokens=[TOKEN])
    try:
        yield hub
    finally:
        await hub.close()


def plan_for(hub: HubHandle, commit: str = "", token: str = "", revision: str = "") -> tuple[str, WeightsPlan]:
    """(the pinned source, its plan) as the control plane sends them: every file of the commit with its size and
    its sha256 (large-file storage) or git blob id; `revision` fetches by another name than the commit."""
    repo = hub.repo(REPO)
    c = repo.commits[commit or repo.head]
    files = [HubFile(path=p, size=b.size, sha256=b.sha256 if b.lfs else "", git_sha1="" if b.lfs else b.git_sha1)
             for p, b in sorted(c.files.items())]
    base = resolve_base(hub.url, REPO, revision or c.id)
    return pinned_source(REPO, c.id), WeightsPlan(files=files, base_url=base, token=token)


def hub_fetcher(d: Path, budget: int | None = None) -> Fetcher:
    return fetcher(d, budget=budget, redirects=CDN)
