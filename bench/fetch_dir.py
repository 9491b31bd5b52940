"""The directory case of bench/fetch.py: a multi-file model (safetensors shards, a .bin copy no one should fetch,
config and tokenizer) on the stand-in hub, run as a process. Measured: huggingface_hub's own snapshot_download of
the files an engine needs (the baseline), and three llmgw nodes of one fabric fetching the resolved directory (the
first from the hub, the other two from its peer listener): throughput, and the hub's bytes against the model's size
(aim: 1.0x, one download per fabric). Method and figures: docs/benchmarks.md, "Weights".
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.addresses import free_port
from llmgw.wire.hub import Resolution

REPO = "bench/model"
AGENT_DIRS = "llmgw.agent.weights.hubdir"  # the agent's hub directory fetch: without it, only the baseline runs
NODES = ("node01", "node02", "node03")  # one fabric


@dataclass(frozen=True)
class FabricRun:
    first: float  # seconds: node01 has the directory, from the hub
    rest: float  # seconds after that: node02 and node03 have it, from node01
    origin_bytes: int  # what the hub sent for the whole run


class StandInHub:
    """`python -m llmgw.sim.hub` serving one model directory, and what it served (its counters over HTTP)."""

    def __init__(self, model: Path) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "llmgw.sim.hub", "--listen", f"127.0.0.1:{port}",
                                      "--repo", f"{REPO}={model}"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # it says so once it listens (or exits, and this reads "")
        if not line.startswith("listening on"):
            raise SystemExit(f"the stand-in hub did not start: {line!r}")

    def origin_bytes(self, reset: bool = True) -> int:
        req = urllib.request.Request(f"{self.url}/_standin/counters" + ("/reset" if reset else ""),
                                     method="POST" if reset else "GET")
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(json.load(r)["total_bytes"])

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


_HF_ALONE = """
import json, sys, time
from huggingface_hub import snapshot_download
repo, commit, endpoint, cache, paths = json.loads(sys.argv[1])
t = time.perf_counter()
snapshot_download(repo, revision=commit, endpoint=endpoint, token=False, cache_dir=cache, allow_patterns=paths)
print(time.perf_counter() - t)
"""


def hf_snapshot(hub: StandInHub, res: Resolution, cache: Path) -> float:
    """Seconds huggingface_hub takes to download the resolution's files (the same ones llmgw fetches), in a process
    of its own: the library as anyone runs it, without the bound llmgw's resolver puts on its answers."""
    args = json.dumps([REPO, res.commit, hub.url, str(cache), [f.path for f in res.files]])
    out = subprocess.run([sys.executable, "-c", _HF_ALONE, args], capture_output=True, text=True, timeout=600,
                         check=True)
    shutil.rmtree(cache, ignore_errors=True)
    return float(out.stdout.strip().splitlines()[-1])


def llmgw_fabric(work: Path, hub_url: str, res: Resolution, pki: Path) -> FabricRun:
    """node01 fetches the directory from the hub; then node02 and node03, told node01 is their fabric's peer (the
    hub still their fallback), fetch it from node01's peer listener. origin_bytes is filled in by the caller."""
    from llmgw.agent.redirects import Redirects
    from llmgw.agent.weights.fetcher import Fetcher, Ready, Waiting
    from llmgw.agent.weights.serve import start_peer_listener
    from llmgw.core.clock import SystemClock
    from llmgw.pki.tls import client_context, server_context
    from llmgw.wire.hub import resolve_base
    from llmgw.wire.messages import WeightsPeer, WeightsPlan

    plan = WeightsPlan(files=list(res.files), base_url=resolve_base(hub_url, res.repo, res.commit))

    def fetcher(n: str) -> Fetcher:
        def tls() -> ssl.SSLContext:
            return client_context(pki / f"{n}.crt", pki / f"{n}.key", pki / "ca.crt")
        return Fetcher(work / n, SystemClock(), tls, n, None, 1 << 42, network=lambda: False,
                       in_use=set, redirects=Redirects(("127.0.0.1",)))  # the stand-in's CDN: another loopback port

    async def have(f: Fetcher, p: WeightsPlan) -> None:
        while isinstance(got := f.ensure(res.source, p), Waiting):
            await asyncio.sleep(0.005)
        assert isinstance(got, Ready), got

    async def run() -> FabricRun:
        nodes = {n: fetcher(n) for n in NODES}
        port = free_port()
        tls = server_context(pki / "node01.crt", pki / "node01.key", pki / "ca.crt", require_client=True)
        listener = await start_peer_listener(work / "node01", "127.0.0.1", port, tls)
        try:
            t = time.perf_counter()
            await have(nodes["node01"], plan)
            first = time.perf_counter() - t
            peer = plan.model_copy(update={"peers": [WeightsPeer(node_id="node01", address="127.0.0.1", port=port)]})
            t = time.perf_counter()
            await asyncio.gather(*(have(nodes[n], peer) for n in NODES[1:]))
            return FabricRun(first, time.perf_counter() - t, 0)
        finally:
            for f in nodes.values():
                await f.close()
            await listener.cleanup()

    try:
        return asyncio.run(run())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def directory_case(tmp: Path, pki: Path, shards: int, shard_mib: int, runs: int) -> list[str]:
    """The table's lines for the directory case."""
    for quiet in ("HF_HUB_DISABLE_TELEMETRY", "HF_HUB_DISABLE_PROGRESS_BARS"):  # read when the library is imported
        os.environ.setdefault(quiet, "1")
    from llmgw.control.hub.hub import resolve
    from llmgw.sim.hub_repo import write_sample_model
    from llmgw.wire.hub import HubRef

    model = write_sample_model(tmp / "hub-model", shards=shards, shard_bytes=shard_mib << 20)
    hub = StandInHub(model)
    try:
        res = resolve(HubRef(REPO, "main"), hub.url, None, 30.0)
        size = res.total_bytes
        hf, fabric = [], []
        for i in range(runs):  # interleaved, so drift on a shared machine falls on both alike
            hf.append(hf_snapshot(hub, res, tmp / f"hf-{i}"))
            if importlib.util.find_spec(AGENT_DIRS) is not None:
                hub.origin_bytes()
                run = llmgw_fabric(tmp / f"fabric-{i}", hub.url, res, pki)
                fabric.append(FabricRun(run.first, run.rest, hub.origin_bytes()))
    finally:
        hub.close()
    hf_rate = size / statistics.median(hf) / 1e6
    lines = [f"directory: {len(res.files)} files, {size / 2**20:.0f} MiB ({shards} shards; the repository also holds "
             f"{(model / 'pytorch_model.bin').stat().st_size >> 20} MiB of .bin and other files no engine needs)",
             f"{'hf snapshot_download':<26}{hf_rate:>8.0f} MB/s"]
    if not fabric:
        return [*lines, "llmgw fabric: not measured (this tree's agent cannot fetch a hub directory)"]
    first = size / statistics.median(r.first for r in fabric) / 1e6
    rest = 2 * size / statistics.median(r.rest for r in fabric) / 1e6
    ratio = max(r.origin_bytes for r in fabric) / size
    return [*lines,
            f"{'llmgw node01 from hub':<26}{first:>8.0f} MB/s",
            f"{'llmgw node02+03 from peer':<26}{rest:>8.0f} MB/s (both together)",
            f"hub: llmgw / hf = {first / hf_rate:.2f} (aim: >= 0.8; llmgw also verifies every digest)",
            f"hub bytes / model size, 3 nodes of one fabric = {ratio:.2f}x (aim: 1.0x)"]


def pki_for(tmp: Path) -> Path:
    from llmgw.pki.ca import init_ca, issue

    pki = tmp / "pki"
    if not (pki / "ca.crt").exists():
        init_ca(pki)
    for n in NODES:
        if not (pki / f"{n}.crt").exists():
            issue(pki, n, ips=["127.0.0.1"])
    return pki

