"""The router's cost with LoRA adapters in the catalog: 0, 100 and 1,000 adapters (64 at most per model, so spread
over several models), requests for the base model and for an adapter, against a catalog with none; the real router
in this process over one engine stand-in answering at once, closed loop, cells interleaved round after round so
every case meets the same background. Also the adapter index's rebuild (at each routing-table generation).
Method and figures: docs/benchmarks.md, "LoRA adapters in the catalog".

    .venv/bin/python -m bench.adapters                 # about a minute
    .venv/bin/python -m bench.adapters --smoke         # a few seconds: that it runs, not what it measures
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from bench.routing import BenchState, on_loopback
from llmgw.config.adapters import served_adapters
from llmgw.config.engines import MAX_ADAPTERS
from llmgw.config.server import ModelSpec, RouterConfig
from llmgw.router.adapters import AdapterIndex, renamed, rewritten
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing
from llmgw.store.sqlite import SqliteStore

ANSWER = {"id": "c", "object": "chat.completion", "model": "m0", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


def catalog(adapters: int) -> list[ModelSpec]:
    """Models m0, m1, … (llama.cpp: the engine whose bodies the router rewrites) holding `adapters` in all."""
    per = MAX_ADAPTERS - 1
    count = max(1, -(-adapters // per))
    out = []
    for i in range(count):
        n = min(per, adapters - i * per) if adapters else 0
        out.append(ModelSpec.model_validate({
            "name": f"m{i}", "source": f"/w/m{i}.gguf", "engine": "llamacpp", "scaling": {"min": 1, "max": 1},
            "adapters": [{"name": f"m{i}-ft{j}", "source": f"/w/m{i}-ft{j}.gguf"} for j in range(n)]}))
    return out


def engine() -> web.Application:
    body = json.dumps(ANSWER).encode()

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def serve(models: list[ModelSpec], upstream: str, db: Path) -> tuple[web.AppRunner, str, SqliteStore]:
    state = BenchState(models[0], [upstream])
    state.models = {m.name: m for m in models}
    store = SqliteStore(db).open()
    router = Router(state, KeyRing(store), RouterConfig(auth=False), 5.0, 8 << 20)
    runner, url = await on_loopback(router.app())
    return runner, url, store


async def cell(url: str, model: str, requests: int, concurrency: int) -> float:
    """Microseconds per request through the router, closed loop at `concurrency`."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
    todo = iter(range(requests))
    async with aiohttp.ClientSession(headers={"Content-Type": "application/json"}) as s:
        async def worker() -> None:
            for _ in todo:
                async with s.post(url + "/v1/chat/completions", data=body) as r:
                    await r.read()
                    if r.status != 200:
                        raise SystemExit(f"{model}: the router answered {r.status}")
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return (time.perf_counter() - t0) * 1e6 / requests


def per_request_us(adapters: int) -> tuple[float, float]:
    """The adapter work alone for one request (its lookup, its body, its answer's name), for the model and for an
    adapter of it, in microseconds: what the router adds to a request with this many adapters in the catalog."""
    models = {m.name: m for m in catalog(adapters)}
    index, base, n = AdapterIndex(), models["m0"], 20000
    body = json.dumps({"model": "m0-ft1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
    answer, payload = json.dumps(ANSWER).encode(), json.loads(body)  # the router has the payload parsed already
    out = []
    for name in ("m0", "m0-ft1"):
        t0 = time.perf_counter()
        for _ in range(n):
            served = index.find(name, models, 1) if name != base.name else None
            rewritten(dict(payload), body, base, served)
            rename = renamed(base, served)
            if rename is not None:
                answer.replace(*rename)
        out.append((time.perf_counter() - t0) * 1e6 / n)
    return out[0], out[1]


def rebuild_us(adapters: int) -> float:
    models = catalog(adapters)
    t0, n = time.perf_counter(), 20
    for _ in range(n):
        served_adapters(models)
    return (time.perf_counter() - t0) * 1e6 / n


async def run(sizes: list[int], rounds: int, requests: int, concurrency: int) -> None:
    eng_runner, upstream = await on_loopback(engine())
    tmp = Path(tempfile.mkdtemp(prefix="bench-adapters-"))
    cases = [("none", 0, "m0")] + [(f"{n} adapters, base", n, "m0") for n in sizes if n] + \
        [(f"{n} adapters, adapter", n, "m0-ft1") for n in sizes if n]
    routers = {n: await serve(catalog(n), upstream, tmp / f"{n}.db") for n in {0, *sizes}}
    got: dict[str, list[float]] = {c[0]: [] for c in cases}
    try:
        for _, url, _ in routers.values():
            await cell(url, "m0", max(10, requests // 10), concurrency)  # warm: connections, caches
        for r in range(rounds):
            for name, n, model in (cases if r % 2 == 0 else cases[::-1]):
                got[name].append(await cell(routers[n][1], model, requests, concurrency))
    finally:
        for runner, _, store in routers.values():
            await runner.cleanup()
            store.close()
        await eng_runner.cleanup()
    none = statistics.median(got["none"])
    print(f"{'case':<26} {'us/request (median)':>20} {'vs none':>8}")
    for name, _, _ in cases:
        med = statistics.median(got[name])
        print(f"{name:<26} {med:>20.0f} {med / none:>8.3f}")
    for n in sizes:
        base, adapter = per_request_us(n)
        print(f"adapter work alone, {n} adapters: {base:.1f} us for the model, {adapter:.1f} us for an adapter; "
              f"index rebuild {rebuild_us(n):.0f} us, once per routing-table "
              "generation")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--requests", type=int, default=2000, help="per cell")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--smoke", action="store_true", help="a few requests per cell: that it runs, in seconds")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.requests = 1, 40
    asyncio.run(run([100, 1000], args.rounds, args.requests, args.concurrency))


if __name__ == "__main__":
    main()
