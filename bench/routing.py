"""Prefix-aware routing against least-loaded and round-robin, on four sim replicas with prefix caches behind the
real router, all in this process; open-loop streamed requests, time to first token at the client, on a "shared"
and a "unique" prompt workload. Method, aims and figures: docs/benchmarks.md, "Routing".

    .venv/bin/python -m bench.routing                  # both workloads, about a minute each
    .venv/bin/python -m bench.routing --requests 300   # quicker
    .venv/bin/python -m bench.routing --smoke          # a few seconds: that it runs, not what it measures
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from llmgw.api.router import Admission, ModelExplanation, ReadyReplica, Wanted
from llmgw.config.server import ModelSpec, RouterConfig
from llmgw.core.clock import Clock, SystemClock
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing, KeysWritten
from llmgw.router.stats import Recorder
from llmgw.sim.behaviour import Behaviour
from llmgw.sim.server import make_app
from llmgw.store.base import AnyUsage, ApiKeyRecord
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import EngineLoad

REPLICAS = 4
PROMPTS = 16
WORDS = 2000


class BenchState:
    """The router's view of a control plane that holds four ready replicas of one model (RouterState). It keeps no
    limits: the router asks it to admit only a key with limits, and the bench has none (auth off)."""

    def __init__(self, spec: ModelSpec, urls: list[str], closes_after_stream: bool = False,
                 slots: int | None = None) -> None:
        self.clock: Clock = SystemClock()
        self.models = {spec.name: spec}
        self._ready = {spec.name: [ReadyReplica(id=f"r{i}", endpoint=u, secret="",
                                                closes_after_stream=closes_after_stream, slots=slots)
                                   for i, u in enumerate(urls)]}

    def generation(self) -> int:
        return 1

    def stale_for(self) -> float:
        return 0.0  # its table is the bench's own: never in doubt

    def not_answering(self) -> dict[str, str]:
        return {}  # its stand-in engines always answer

    def ready_seconds(self, model: str) -> float | None:
        return None  # every model it routes is ready: nothing waits for a load

    def keys_version(self) -> int:
        return 0

    def keys_since(self, version: int) -> KeysWritten | None:
        return None  # keys are read from the store

    def ready(self) -> dict[str, list[ReadyReplica]]:
        return self._ready

    def loads(self) -> dict[str, EngineLoad]:
        return {}  # the router's own in-flight counts only: no heartbeats here

    def want(self, model: str) -> None:
        pass

    def used(self, replica_id: str, at: float, outstanding: int) -> None:
        pass

    async def store_usage(self, batch: list[AnyUsage]) -> None:
        pass

    async def explain(self, model: str) -> ModelExplanation | None:
        return ModelExplanation(model=model, wanted=Wanted.Replicas)

    async def flush(self) -> None:
        pass

    async def admit(self, key: ApiKeyRecord, cost: int, model: str = "") -> Admission:
        raise RuntimeError(f"key {key.id} has limits: this bench's state keeps none")

    def settle(self, ticket: str, used: int) -> None:
        raise RuntimeError("this bench's state admits nothing, so it has nothing to settle")

    def attach(self, recorder: Recorder) -> None:
        pass

    def ejected(self, replica_id: str, words: str) -> None:
        pass


async def on_loopback(app: web.Application) -> tuple[web.AppRunner, str]:
    """An app served on a free loopback port: its runner (to clean up) and its URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()  # bound at once: no port to find free first
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def router_for(policy: str, spec_kw: dict[str, object], urls: list[str], db: Path,
               closes_after_stream: bool = False, margin: float | None = None,
               slots: int | None = None) -> tuple[Router, SqliteStore]:
    """The real router over BenchState, with the model's routing policy set to `policy`; `closes_after_stream`
    and `slots` as the engines' agents would report them (their adapter's Launch says)."""
    spec = ModelSpec.model_validate({"name": "m", "routing": "prefix" if policy == "prefix" else "least_loaded",
                                     **spec_kw})
    store = SqliteStore(db).open()
    state = BenchState(spec, urls, closes_after_stream, slots)
    cfg = RouterConfig(auth=False) if margin is None else RouterConfig(auth=False, prefix_margin=margin)
    return Router(state, KeyRing(store), cfg, 5.0, 8 << 20), store


@dataclass
class Result:
    ttft: list[float]
    elapsed: float
    failed: int
    first_failure: str = ""
    cpu: float = 0.0  # this process's CPU seconds per second of the cell: engines, router and client share it
    load: float = 0.0  # the machine's 1-minute load average at the cell's end


def prompts(rng: random.Random, workload: str, n: int) -> list[str]:
    shared = [" ".join(f"w{p}x{rng.randrange(1000)}" for _ in range(WORDS)) for p in range(PROMPTS)]
    if workload == "shared":
        return [rng.choice(shared) for _ in range(n)]
    return [" ".join(f"u{i}x{rng.randrange(1000)}" for _ in range(WORDS)) for i in range(n)]


async def one(session: aiohttp.ClientSession, url: str, system: str, user: str, headers: dict[str, str]) -> float:
    body = {"model": "m", "stream": True,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    t0 = time.perf_counter()
    async with session.post(url + "/v1/chat/completions", data=json.dumps(body), headers=headers) as r:
        if r.status != 200:
            raise RuntimeError(f"{r.status}: {(await r.read())[:200]!r}")
        first = None
        async for line in r.content:
            if first is None and line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                first = time.perf_counter() - t0
        if first is None:
            raise RuntimeError("no token")
        return first


async def run(policy: str, workload: str, args: argparse.Namespace, tmp: Path) -> Result:
    b = Behaviour(prefill_tokens_per_second=args.prefill, cache_blocks=args.cache_blocks, max_running=args.slots)
    runners, urls = [], []
    for _ in range(REPLICAS):
        runner, url = await on_loopback(make_app("m", tokens=8, tokens_per_second=400, behaviour=b))
        runners.append(runner)
        urls.append(url)
    router, store = router_for(policy, {"source": "org/m", "engine": "sim",
                                        "scaling": {"min": REPLICAS, "max": REPLICAS}},
                               urls, tmp / f"{policy}-{workload}.db",
                               slots=args.slots or None)  # as the sim adapter reports --max-running
    rrunner, router_url = await on_loopback(router.app())
    rng = random.Random(args.seed)
    systems = prompts(rng, workload, args.requests)
    gaps = [rng.expovariate(args.rate) for _ in range(args.requests)]
    ttft: list[float] = []
    failures: list[str] = []
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            async def send(i: int) -> None:
                url = urls[i % REPLICAS] if policy == "round_robin" else router_url
                try:
                    ttft.append(await one(s, url, systems[i], f"question {i} {rng.random()}", {}))
                except (RuntimeError, aiohttp.ClientError) as e:
                    failures.append(f"{type(e).__name__}: {e}")

            tasks = []
            t0, cpu0 = time.perf_counter(), time.process_time()
            start = asyncio.get_running_loop().time()
            at = 0.0
            for i in range(args.requests):
                at += gaps[i]
                await asyncio.sleep(max(0.0, start + at - asyncio.get_running_loop().time()))
                tasks.append(asyncio.create_task(send(i)))
            await asyncio.gather(*tasks)
            elapsed = time.perf_counter() - t0
            cpu = (time.process_time() - cpu0) / elapsed
    finally:
        await rrunner.cleanup()
        await router.close()
        for r in runners:
            await r.cleanup()
        store.close()
    return Result(ttft, elapsed, len(failures), failures[0] if failures else "", cpu, os.getloadavg()[0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--rate", type=float, default=30.0, help="arrivals per second")
    ap.add_argument("--prefill", type=float, default=10_000.0, help="prompt tokens per second per replica")
    ap.add_argument("--slots", type=int, default=2, help="requests generating at once per replica")
    ap.add_argument("--cache-blocks", type=int, default=1_750, help="prefix cache per replica, 64-char blocks")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--smoke", action="store_true", help="24 requests per cell: that it runs, in a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.requests = 24
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        for workload in ("shared", "unique"):
            print(f"workload {workload}: {args.requests} requests at {args.rate}/s, 4 replicas, prefill "
                  f"{args.prefill:.0f} tok/s, {args.slots} slots, cache {args.cache_blocks} blocks each")
            results = {p: asyncio.run(run(p, workload, args, Path(d))) for p in ("round_robin", "least_loaded",
                                                                                   "prefix")}
            failed += print_table(results)
    if failed:
        raise SystemExit(f"{failed} requests failed: the figures above leave them out")


def print_table(results: dict[str, Result]) -> int:
    """One workload's table; the number of requests that failed (each policy's first failure is printed)."""
    for p, r in results.items():
        if r.failed:
            print(f"{p}: {r.failed} of {r.failed + len(r.ttft)} requests failed, the first: {r.first_failure}")
        if not r.ttft:
            raise SystemExit(f"{p}: every request failed: nothing to measure")
    print(f"{'policy':<14}{'mean TTFT':>11}{'p90 TTFT':>10}{'req/s':>8}{'failed':>8}{'vs least':>10}{'CPU/s':>7}"
          f"{'load':>6}")
    base = statistics.mean(results["least_loaded"].ttft)
    for p, r in results.items():
        mean = statistics.mean(r.ttft)
        p90 = sorted(r.ttft)[int(0.9 * (len(r.ttft) - 1))]
        print(f"{p:<14}{mean * 1000:>9.0f}ms{p90 * 1000:>8.0f}ms{len(r.ttft) / r.elapsed:>8.1f}"
              f"{r.failed:>8}{mean / base:>10.2f}{r.cpu:>7.2f}{r.load:>6.1f}")
    return sum(r.failed for r in results.values())


if __name__ == "__main__":
    main()
