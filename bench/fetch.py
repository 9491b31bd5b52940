"""Weights transfer throughput against curl, in one run on this machine: the same file moved by the agent's Fetcher
and by curl, from a local origin (plain HTTP) and from a node's peer listener (mutual TLS); medians of --runs, the
source in the page cache. Then a model directory named by a hub id (bench/fetch_dir.py): huggingface_hub's own
download against three llmgw nodes of one fabric. Method and figures: docs/benchmarks.md, "Weights".

    .venv/bin/python -m bench.fetch [--size-mib 512] [--runs 3] [--dir-shards 4 --dir-shard-mib 128]
    .venv/bin/python -m bench.fetch --smoke          # 4 MiB and 3 x 2 MiB shards, one run: that it runs
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.addresses import free_port
from bench.fetch_dir import directory_case, pki_for
from llmgw.wire.messages import WeightsPlan

ORIGIN = """
import sys
from aiohttp import web
async def h(req):
    return web.FileResponse(sys.argv[1])
app = web.Application()
app.router.add_get('/model.gguf', h)
web.run_app(app, host='127.0.0.1', port=int(sys.argv[2]), print=None, access_log=None)
"""

PEER = """
import asyncio, sys
from pathlib import Path
from llmgw.agent.weights.serve import start_peer_listener
from llmgw.pki.tls import server_context
async def main():
    pki = Path(sys.argv[2])
    tls = server_context(pki / 'node02.crt', pki / 'node02.key', pki / 'ca.crt', require_client=True)
    await start_peer_listener(Path(sys.argv[1]), '127.0.0.1', int(sys.argv[3]), tls)
    await asyncio.Event().wait()
asyncio.run(main())
"""



def wait_port(port: int) -> None:
    import socket

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def curl(args: list[str], out: Path) -> float:
    t = time.perf_counter()
    subprocess.run(["curl", "-sS", "--fail", "-o", str(out), *args], check=True)
    dt = time.perf_counter() - t
    out.unlink()
    return dt


def llmgw_fetch(work: Path, url: str, plan: WeightsPlan, pki: Path | None) -> float:
    from llmgw.agent.weights.fetcher import Fetcher, Ready, Waiting
    from llmgw.core.clock import SystemClock
    from llmgw.pki.tls import client_context

    async def run() -> float:
        tls = (lambda: client_context(pki / "node01.crt", pki / "node01.key", pki / "ca.crt")) if pki else None
        f = Fetcher(work, SystemClock(), tls, "node01", None, 1 << 42, network=lambda: False, in_use=set)
        t = time.perf_counter()
        while isinstance(got := f.ensure(url, plan), Waiting):
            await asyncio.sleep(0.005)
        dt = time.perf_counter() - t
        assert isinstance(got, Ready), got
        await f.close()
        return dt

    try:
        return asyncio.run(run())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir-shards", type=int, default=4, help="the hub model's safetensors shards")
    ap.add_argument("--dir-shard-mib", type=int, default=128)
    ap.add_argument("--smoke", action="store_true", help="4 MiB, 3 x 2 MiB shards, one run: that it runs")
    a = ap.parse_args()
    if a.smoke:
        a.size_mib, a.runs, a.dir_shards, a.dir_shard_mib = 4, 1, 3, 2
    from llmgw.agent.weights import local
    from llmgw.pki.ca import init_ca, issue
    from llmgw.wire.messages import WeightsPeer

    tmp = Path(tempfile.mkdtemp(prefix="bench-fetch-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        size = a.size_mib << 20
        src = tmp / "model.gguf"
        with src.open("wb") as f:
            for _ in range(a.size_mib):
                f.write(os.urandom(1 << 20))
        digest = hashlib.sha256(src.read_bytes()).hexdigest()
        pki = tmp / "pki"
        init_ca(pki)
        for n in ("node01", "node02"):
            issue(pki, n, ips=["127.0.0.1"])
        oport, pport = free_port(), free_port()
        url = f"http://127.0.0.1:{oport}/model.gguf"
        held = local.target_for(tmp / "peer", url)
        held.parent.mkdir(parents=True)
        os.link(src, held)
        local.record(held.parent, url, size, digest)
        procs.append(subprocess.Popen([sys.executable, "-c", ORIGIN, str(src), str(oport)]))
        procs.append(subprocess.Popen([sys.executable, "-c", PEER, str(tmp / "peer"), str(pki), str(pport)]))
        wait_port(oport)
        wait_port(pport)
        plan = WeightsPlan(sha256=digest, size=size)
        peer_plan = WeightsPlan(sha256=digest, size=size, peers=[WeightsPeer(node_id="node02", address="127.0.0.1",
                                                                             port=pport)])
        peer_url = f"https://node02:{pport}/v1/weights?source={url.replace(':', '%3A').replace('/', '%2F')}"
        tls_args = ["--resolve", f"node02:{pport}:127.0.0.1", "--cacert", str(pki / "ca.crt"),
                    "--cert", str(pki / "node01.crt"), "--key", str(pki / "node01.key")]
        times: dict[str, list[float]] = {k: [] for k in ("curl origin", "llmgw origin", "curl peer", "llmgw peer")}
        for _ in range(a.runs):  # interleaved, so drift on a shared machine falls on both alike
            times["curl origin"].append(curl([url], tmp / "c.out"))
            times["llmgw origin"].append(llmgw_fetch(tmp / "w", url, plan, None))
            times["curl peer"].append(curl([*tls_args, peer_url], tmp / "c.out"))
            times["llmgw peer"].append(llmgw_fetch(tmp / "w", url, peer_plan, pki))
        rate = {k: size / statistics.median(v) / 1e6 for k, v in times.items()}
        print(f"file: {a.size_mib} MiB, median of {a.runs} runs, {os.cpu_count()} CPUs")
        print(f"{'transfer':<14}{'MB/s':>8}")
        for k, v in rate.items():
            print(f"{k:<14}{v:>8.0f}")
        print(f"origin: llmgw / curl = {rate['llmgw origin'] / rate['curl origin']:.2f} (llmgw also hashes)")
        print(f"peer:   llmgw / curl = {rate['llmgw peer'] / rate['curl peer']:.2f} (mutual TLS both)")
        for line in directory_case(tmp, pki_for(tmp), a.dir_shards, a.dir_shard_mib, a.runs):
            print(line)
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
