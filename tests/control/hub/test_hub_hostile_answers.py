"""A hub (or a mirror of its API) that answers with JSON of the wrong shapes: each answer is a HubFailed with a
Reason and words, never another exception; and a resolver that raises anything else fails that model alone, with
back-off, while the other hub models of the catalog resolve."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from llmgw.config.server import HubConfig, ModelSpec
from llmgw.control.hub.hub import resolve
from llmgw.control.hub.hub_models import HubModels
from llmgw.core.clock import FakeClock
from llmgw.core.errors import HubFailed
from llmgw.core.reasons import Reason
from llmgw.wire.hub import HubFile, HubRef, Resolution
from tests.clusters import model
from tests.harness import served

COMMIT = "a" * 40
SHA256 = "b" * 64
GOOD_LFS = {"size": 10, "sha256": SHA256, "pointerSize": 100}


def info(sha: Any = COMMIT, siblings: Any = None) -> dict[str, Any]:
    return {"id": "acme/m", "sha": sha, "private": False, "gated": False, "siblings": siblings if siblings is not None
            else [{"rfilename": "model.safetensors", "size": 10, "blobId": "c" * 40, "lfs": GOOD_LFS}]}


class Mirror:
    def __init__(self) -> None:
        self.body: Any = info()
        self.echo = 0  # a status answered with the request's Authorization header in its words

    async def handle(self, request: web.Request) -> web.Response:
        if self.echo:
            words = f"denied for {request.headers.get('Authorization', '')}"
            return web.json_response({"error": words}, status=self.echo, reason=words)
        return web.Response(text=json.dumps(self.body), content_type="application/json",
                            headers={"X-Repo-Commit": COMMIT})


@pytest_asyncio.fixture
async def mirror() -> AsyncIterator[tuple[Mirror, str]]:
    m = Mirror()
    async with served(m.handle) as url:
        yield m, url


BAD = {
    "commit not a string": info(sha=5),
    "a path not a string": info(siblings=[{"rfilename": 5, "size": 10, "blobId": "c" * 40}]),
    "a path a list": info(siblings=[{"rfilename": ["model.safetensors"], "size": 10, "blobId": "c" * 40}]),
    "a digest not a string": info(siblings=[{"rfilename": "model.safetensors", "size": 10,
                                              "lfs": {"size": 10, "sha256": 7, "pointerSize": 1}}]),
    "a size not a number": info(siblings=[{"rfilename": "model.safetensors", "size": {"x": 1},
                                            "lfs": GOOD_LFS}]),
    "siblings not a list": info(siblings={"rfilename": "model.safetensors"}),
    "an answer not an object": [1, 2, 3],
}


@pytest.mark.parametrize("case", list(BAD))
async def test_an_answer_of_the_wrong_shape_is_a_hub_failure(mirror: tuple[Mirror, str], case: str) -> None:
    m, url = mirror
    m.body = BAD[case]
    with pytest.raises(HubFailed) as e:
        await asyncio.to_thread(resolve, HubRef("acme/m", "main"), url, None, 5.0)
    assert e.value.reason in (Reason.HubUnreachable, Reason.NoWeightsFiles)
    assert url in str(e.value) or "acme/m" in str(e.value)


async def test_the_good_answer_resolves(mirror: tuple[Mirror, str]) -> None:
    _, url = mirror
    got = await asyncio.to_thread(resolve, HubRef("acme/m", "main"), url, None, 5.0)
    assert got.commit == COMMIT and [f.path for f in got.files] == ["model.safetensors"]


def test_an_unexpected_error_fails_that_model_alone_with_back_off() -> None:
    calls: list[str] = []

    def resolver(ref: HubRef, endpoint: str, token: str | None, timeout: float) -> Resolution:
        calls.append(ref.repo)
        if ref.repo == "org/broken":
            raise AttributeError("'int' object has no attribute 'lower'")
        return Resolution(ref.repo, ref.revision, COMMIT, (HubFile(path="model.safetensors", size=1),))

    clock = FakeClock()
    o = HubModels(HubConfig(endpoint="http://127.0.0.1:9"), clock, resolver)
    models: dict[str, ModelSpec] = {"a": model(name="a", source="hf://org/broken", gpus_per_shard=0, cls=None),
                                    "b": model(name="b", source="hf://org/fine", gpus_per_shard=0, cls=None)}
    asyncio.run(o.tick(models))
    assert o.states["b"].resolution is not None
    assert o.states["a"].resolution is None and o.states["a"].reason == Reason.HubUnreachable
    assert "AttributeError" in o.states["a"].message
    asyncio.run(o.tick(models))
    assert calls.count("org/broken") == 1, "tried again only after its back-off"


async def test_an_answer_past_the_bound_is_cut_off_not_read_whole(mirror: tuple[Mirror, str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from llmgw.control.hub import hub_http

    m, url = mirror
    monkeypatch.setattr(hub_http, "MAX_ANSWER", 100_000)
    m.body = info(siblings=[{"rfilename": f"model-{i:05d}.safetensors", "size": 10, "lfs": GOOD_LFS}
                            for i in range(3000)])  # some 300 kB
    with pytest.raises(HubFailed) as e:
        await asyncio.to_thread(resolve, HubRef("acme/m", "main"), url, None, 5.0)
    assert e.value.reason == Reason.HubUnreachable and "more than" in str(e.value) and url in str(e.value)
    m.body = info()
    assert (await asyncio.to_thread(resolve, HubRef("acme/m", "main"), url, None, 5.0)).commit == COMMIT


@pytest.mark.parametrize("status", [401, 403, 500])
async def test_a_hub_echoing_the_token_does_not_put_it_in_the_words(mirror: tuple[Mirror, str], status: int) -> None:
    m, url = mirror
    m.echo = status
    with pytest.raises(HubFailed) as e:
        await asyncio.to_thread(resolve, HubRef("acme/m", "main"), url, "hf_secret_token_1234", 5.0)
    assert "hf_secret_token_1234" not in str(e.value) and str(status) in str(e.value)
