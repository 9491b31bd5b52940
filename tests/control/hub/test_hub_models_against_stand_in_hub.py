"""The hub models' owner with the real resolver against the stand-in hub over loopback HTTP: a branch that moves on
the hub changes nothing resolved; a gated repository without a token says so, with the token file's trouble; with
the token it resolves, and only its plans carry the token; a hub that does not answer is HubUnreachable."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from llmgw.config.server import HubConfig, ModelSpec
from llmgw.control.hub.hub_models import HubModels, hub_resolve
from llmgw.core.clock import FakeClock
from llmgw.core.reasons import Reason
from llmgw.sim.hub import HubHandle, start_hub
from llmgw.sim.hub_repo import HubRepo, write_sample_model
from tests.clusters import model
from tests.harness import free_port
from tests.sim.hubs import REPO, SMALL_LFS, TOKEN


@pytest_asyncio.fixture
async def hub(tmp_path: Path) -> AsyncIterator[HubHandle]:
    root = write_sample_model(tmp_path / "model", shards=2, shard_bytes=100_000)
    repos = [HubRepo.from_dir(REPO, root, lfs_threshold=SMALL_LFS),
             HubRepo.from_dir("acme/gated", root, lfs_threshold=SMALL_LFS, gated=True)]
    h = await start_hub(repos, tokens=[TOKEN])
    yield h
    await h.close()


def catalog(source: str) -> dict[str, ModelSpec]:
    return {"m": model(source=source, gpus_per_shard=0, cls=None)}


def owner(endpoint: str, token_file: Path | None = None) -> HubModels:
    cfg = HubConfig(endpoint=endpoint, token_file=str(token_file) if token_file else None)
    return HubModels(cfg, FakeClock(), hub_resolve, timeout=5.0)


async def test_a_branch_that_moves_on_the_hub_changes_nothing_resolved(hub: HubHandle) -> None:
    o = owner(hub.url)
    models = catalog(f"hf://{REPO}")
    await o.tick(models)
    res = o.resolutions()["m"]
    assert res.commit == hub.repo(REPO).head and res.total_bytes > 200_000
    hub.repo(REPO).commit("main", {"config.json": b'{"moved": true}'})
    await o.tick(models)
    assert o.pinned(models)["m"].source == f"hf://{REPO}@{res.commit}"
    plan = o.plans()[res.source]
    assert plan.base_url == f"{hub.url}/{REPO}/resolve/{res.commit}" and plan.token == ""
    assert {f.path for f in plan.files} >= {"config.json", "model.safetensors.index.json"}


async def test_a_gated_repository_needs_the_token_and_only_its_plans_carry_it(hub: HubHandle, tmp_path: Path) -> None:
    o = owner(hub.url)
    await o.tick(catalog("hf://acme/gated"))
    st = o.states["m"]
    assert st.resolution is None and st.reason == Reason.HubAccessDenied
    assert st.message.startswith("hf://acme/gated: ") and "no hub.token_file is configured" in st.message
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    tok.chmod(0o600)
    o = owner(hub.url, tok)
    await o.tick(catalog("hf://acme/gated"))
    res = o.resolutions()["m"]
    assert res.gated and o.plans()[res.source].token == TOKEN


async def test_a_hub_that_does_not_answer_is_unreachable_in_words() -> None:
    o = owner(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    await o.tick(catalog(f"hf://{REPO}"))
    st = o.states["m"]
    assert st.reason == Reason.HubUnreachable and st.message.startswith(f"hf://{REPO}: ")
