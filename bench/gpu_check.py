"""The GPU check's measuring half, run by scripts/gpu-check.sh after it has a llama-server and its release archive:
serves the archive from a release server on loopback, starts a control plane and one agent that reads this
machine's GPU as it is, waits for the node to install and run the build, then measures through the router the first
token of an on-demand load and tokens/s, against the same build with no GPU visible. Prints the node report and a
summary; writes the summary and its figures under --out. Method and figures: docs/benchmarks.md, "GPU check".

Not run alone: the script gives it the build, the model and the deadline (`scripts/gpu-check.sh --help`).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, free_port, plan
from llmgw.agent.discovery import gpu_use
from llmgw.agent.discovery.commands import run_command
from llmgw.agent.supervisor.gpu_proof import group_pids
from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up

NODE = "gpu01"
MODEL = "smollm2"
PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


class Failed(Exception):
    """The check could not go on; the words say what was awaited and what was seen."""


class DeadlineReached(Failed):
    """The script's deadline came while waiting: exit 124, as the script's own watchdog would."""


@dataclass
class Stream:
    """One streamed completion: when it was sent, its first and last tokens (time.time()), and how many came."""

    sent: float
    first: float
    last: float
    tokens: int
    engine_per_s: float | None  # llama-server's own figure (its final chunk's timings), where it reaches us

    @property
    def per_s(self) -> float:
        return (self.tokens - 1) / (self.last - self.first) if self.tokens > 1 and self.last > self.first else 0.0


def wait_for(cond: Callable[[], Any], deadline: float, what: str, seen: Callable[[], str] = lambda: "") -> Any:
    """Poll cond() until it is truthy; at the deadline (time.time()) fail, saying what was awaited and seen."""
    last = ""
    while time.time() < deadline:
        try:
            v = cond()
            if v:
                return v
        except (OSError, ValueError, KeyError) as e:
            last = f"{type(e).__name__}: {e}"
        time.sleep(0.2)
    raise DeadlineReached(f"the deadline came while waiting for {what}; {seen() or last or 'nothing seen'}")


@contextmanager
def release_server(folder: Path) -> Iterator[str]:
    """The folder over HTTP on loopback, as a release's download address."""
    quiet = type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), partial(quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def stream(url: str, key: str, tokens: int, deadline: float) -> Stream:
    """A streamed chat completion of `tokens` tokens (end of text ignored), timed token by token."""
    host, _, rest = url.removeprefix("http://").partition("/")
    body = json.dumps({"model": MODEL, "stream": True, "max_tokens": tokens, "ignore_eos": True, "temperature": 0,
                       "messages": PROMPT})
    c = http.client.HTTPConnection(host, timeout=max(5.0, deadline - time.time()))
    sent = time.time()
    first = last = 0.0
    n, engine = 0, None
    try:
        c.request("POST", "/" + rest, body, {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise Failed(f"{url}: {r.status} {r.read()[:400]!r}")
        while line := r.readline():
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            engine = event.get("timings", {}).get("predicted_per_second", engine)
            if any((ch.get("delta") or {}).get("content") for ch in event.get("choices", [])):
                last = time.time()
                first = first or last
                n += 1
    finally:
        c.close()
    if not n:
        raise Failed(f"{url}: the stream ended without a token")
    return Stream(sent, first, last, n, engine)


def cluster_plan(work: Path, source: dict[str, Any], model: Path) -> ClusterPlan:
    """One control plane and one node on this machine as it is (its GPU read by NVML, else nvidia-smi)."""
    node = NodePlan(id=NODE, address="127.0.0.1", kind="cpu", gpus=0,
                    port_range=os.environ.get("LLMGW_GPU_CHECK_NODE_PORTS") or engine_ports(),
                    agent_extra={"engines": {}, "probe_engines": ["llamacpp"]})  # nothing named: it installs
    models = [{"name": MODEL, "source": str(model), "engine": "llamacpp", "profile": {"gpus_per_shard": 1},
               "scaling": {"min": 0, "max": 1, "stop_unused_after": "30m"}}]  # loaded by the first request
    return plan(work, [node], models, heartbeat_interval="1s", reconcile_interval="0.5s", load_wait="240s",
                extra_server={"engines": [source]})


EVAL = re.compile(r"\|\s+eval time = .*?([0-9.]+) tokens per second")


def engine_logs(p: ClusterPlan) -> list[Path]:
    return sorted((p.workdir / "nodes" / NODE / "state" / "logs").glob("*.log"))


def engine_rate(p: ClusterPlan) -> float | None:
    """llama-server's own tokens/s for the last request it finished, from its log (the router does not pass its
    `timings` on)."""
    rates = [float(m.group(1)) for log in engine_logs(p) for m in EVAL.finditer(log.read_text(errors="replace"))]
    return rates[-1] if rates else None


def gpu_processes() -> str:
    """What the driver says runs on the GPU: the engine, with its memory, when it really offloaded."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"nvidia-smi: {e}"
    words = (r.stdout if r.returncode == 0 else f"nvidia-smi exited {r.returncode}: {r.stderr}").strip()
    return "; ".join(words.splitlines()) or "none"


def gpu_held(report: dict[str, Any]) -> str:
    """What llmgw's own per-process reading (the one the agent proves a GPU build with after its first ready) says
    the serving shard's processes hold on the GPUs it was given."""
    shards = [s for s in report.get("shards", []) if s.get("pid") and s.get("state") == "ready"]
    if not shards:
        return "no ready shard to read"
    reading = gpu_use.reader(gpu_use.nvml_module(), run_command, None)()
    if reading.problem:
        return f"not read: {reading.problem}"
    uuids = {g["index"]: g.get("uuid", "") for g in report["hardware"].get("gpus", [])}
    given = [gpu_use.Given(i, u) for i, u in sorted(uuids.items())]  # the machine's one GPU, given to the model
    pids = group_pids(int(shards[0]["pid"]))
    held = gpu_use.held_on(given, pids, reading)
    words = gpu_use.unproven(given, pids, reading)
    mib = "not accounted per process" if held is None else f"{held >> 20} MiB"
    return f"{mib} on GPU(s) {[g.index for g in given]} by its {len(pids)} process(es) (read by {reading.source})" + (
        f"; NOT proven: {words}" if words else "; proven")


def engine_row(p: ClusterPlan) -> tuple[dict[str, Any], dict[str, Any] | None]:
    report: dict[str, Any] = admin_get(p, f"/api/nodes/{NODE}")["report"]
    rows = [e for e in report.get("engines", []) if e["name"] == "llamacpp"]
    return report, rows[0] if rows else None


def node_words(p: ClusterPlan) -> str:
    """`llmgw ctl nodes`, as an operator would read it."""
    r = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "ctl", "nodes", "--admin", p.admin],
                       capture_output=True, text=True, timeout=30,
                       env={**os.environ, "COLUMNS": "200", "LLMGW_ADMIN_TOKEN_FILE": str(p.token_file)})
    return (r.stdout + r.stderr).rstrip()


def installed(p: ClusterPlan, variant: str, deadline: float) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        _, row = engine_row(p)
        return row if row and row["runs"] and row.get("variant") == variant else None

    def seen() -> str:
        try:
            report, row = engine_row(p)
            return f"the node reports {row} (installing: {report.get('install_progress')})\n{node_words(p)}"
        except (OSError, ValueError, KeyError) as e:
            return f"no node report ({e})"

    row: dict[str, Any] = wait_for(running, deadline, f"{NODE} to install and run llamacpp {variant}", seen)
    return row


@contextmanager
def cpu_server(binary: Path, model: Path, deadline: float) -> Iterator[str]:
    """The same llama-server with no GPU visible, on loopback: the CPU's figure for the same model and build."""
    port = free_port()
    log = model.parent / "cpu-llama-server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(binary / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port",
                                 str(port), "-t", str(cpu_threads()), "-np", "1", "-ngl", "0"],
                                env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        def up() -> bool:
            if proc.poll() is not None:
                raise Failed(f"the CPU llama-server exited {proc.returncode}: {log.read_text()[-1500:]}")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                return bool(r.status == 200)

        wait_for(up, deadline, "the CPU llama-server's /health")
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def cpu_threads() -> int:
    """Every core this process may use, unless LLMGW_GPU_CHECK_CPU_THREADS says (a shared machine: fewer)."""
    return int(os.environ.get("LLMGW_GPU_CHECK_CPU_THREADS") or len(os.sched_getaffinity(0)))


def gpus_words(report: dict[str, Any]) -> str:
    hw = report["hardware"]
    cards = ", ".join(f"{g['name']} ({g['gpu_class']}, {g['memory_mib']} MiB)" for g in hw.get("gpus", []))
    return (f"{cards or 'none'}; driver {hw.get('nvidia_driver') or '-'}, CUDA {hw.get('nvidia_cuda') or '-'} "
            f"(read by {hw.get('gpu_source')}); glibc {hw.get('glibc') or '-'}")


def per_s(v: float | None) -> str:
    return f"{v:.1f}" if v else "not passed on"


def summary(a: argparse.Namespace, r: dict[str, Any]) -> str:
    s = r["stages_s"]
    lines = [
        "== llmgw GPU check ==",
        f"machine: {platform.machine()}, {os.cpu_count()} cores; GPUs as {NODE} reports them: {r['gpus']}",
        f"llamacpp {a.version} {r['variant']}: {a.build}; archive {r['archive_mb']:.1f} MB, sha256 "
        f"{r['sha256'][:16]}…, served from {r['release']}",
        f"node {NODE}: llamacpp {r['engine'].get('version')} {r['engine'].get('variant')} "
        f"{'running' if r['engine'].get('runs') else 'NOT running'} from {r['engine'].get('path')}",
        f"first token {r['first_token_s']:.1f} s after the script started (build {s['build']:.0f} s, packing and "
        f"setting up {s['setup']:.1f} s, control plane and node up {s['cluster']:.1f} s, install "
        f"{s['install']:.1f} s, load and first token {s['load']:.1f} s)",
        f"tokens/s, {r['tokens']} tokens: GPU build through the router {r['gpu_per_s']:.1f} (engine's own: "
        f"{per_s(r['gpu_engine_per_s'])}); same build with no GPU visible, direct, {r['cpu_threads']} threads: "
        f"{r['cpu_per_s']:.1f} (engine's own: {per_s(r['cpu_engine_per_s'])}); ratio {r['ratio']:.2f}",
        f"model: {r['model']} ({r['model_mb']:.1f} MB); on the GPU while it served: {r['gpu_processes']}",
        f"per-process GPU memory, as the agent reads it to prove a GPU build: {r['gpu_held']}",
        "ctl nodes:",
        r["ctl_nodes"],
    ]
    return "\n".join(lines)


def check(a: argparse.Namespace) -> dict[str, Any]:
    work, archive, model = Path(a.work), Path(a.archive), Path(a.model)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    variant = f"cuda{a.cuda.split('.')[0]}-x86_64"
    r: dict[str, Any] = {"variant": variant, "sha256": digest, "archive_mb": archive.stat().st_size / 1e6,
                         "tokens": a.tokens, "model": a.model_name, "model_mb": model.stat().st_size / 1e6}
    with release_server(archive.parent) as base:
        r["release"] = base
        source = {"name": "llamacpp", "version": a.version, "variants": [
            {"variant": variant, "url": base + archive.name, "sha256": digest, "cuda": a.cuda, "glibc": a.glibc}]}
        p = cluster_plan(work / "cluster", source, model)
        c = Cluster(p)
        t = time.time()
        c.start()
        try:
            wait_for(lambda: admin_up(p), a.deadline, "the control plane")
            cluster_up = time.time()
            r["engine"] = installed(p, variant, a.deadline)
            ready = time.time()
            key = admin_post(p, "/api/keys", {"name": "gpu-check"})["key"]
            first = stream(p.api + "/v1/chat/completions", key, 8, a.deadline)
            r["first_token_s"] = first.first - a.started
            r["stages_s"] = {"build": a.build_seconds, "setup": t - a.started - a.build_seconds,
                             "cluster": cluster_up - t, "install": ready - cluster_up, "load": first.first - ready}
            gpu = stream(p.api + "/v1/chat/completions", key, a.tokens, a.deadline)
            r["gpu_per_s"], r["gpu_engine_per_s"] = gpu.per_s, gpu.engine_per_s or engine_rate(p)
            r["gpu_processes"] = gpu_processes()
            report, _ = engine_row(p)
            r["gpu_held"] = gpu_held(report)
            r["gpus"], r["node_report"], r["ctl_nodes"] = gpus_words(report), report, node_words(p)
        except BaseException:
            for name in ("agent-" + NODE, "server"):
                print(f"--- {name}.log (last lines)\n{c.log(name)[-3000:]}", file=sys.stderr)
                write_out(a.out, f"gpu-check-{name}.log", c.log(name)[-1_000_000:])
            for log in engine_logs(p)[:1]:
                write_out(a.out, "gpu-check-engine.log", log.read_text(errors="replace")[-1_000_000:])
            raise
        finally:
            c.stop()
    with cpu_server(Path(a.bin), model, a.deadline) as url:
        cpu = stream(url, "none", a.tokens, a.deadline)
    r["cpu_per_s"], r["cpu_engine_per_s"], r["cpu_threads"] = cpu.per_s, cpu.engine_per_s, cpu_threads()
    r["ratio"] = r["gpu_per_s"] / r["cpu_per_s"] if r["cpu_per_s"] else 0.0
    return r


def write_out(out: str, name: str, text: str) -> None:
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / name).write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("work", "archive", "version", "cuda", "glibc", "bin", "model", "model-name", "build", "out"):
        ap.add_argument(f"--{flag}", default="")
    ap.add_argument("--started", type=float, required=True)  # the script's start, time.time()
    ap.add_argument("--deadline", type=float, required=True)  # when to give up, time.time()
    ap.add_argument("--build-seconds", type=float, default=0.0)
    ap.add_argument("--tokens", type=int, default=256)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # the script's deadline: stop the cluster, then go
    try:
        r = check(a)
    except Failed as e:
        write_out(a.out, "gpu-check-summary.txt", f"== llmgw GPU check FAILED ==\n{e}\n")
        print(f"gpu-check: {e}", file=sys.stderr, flush=True)
        # the deadline the watchdog holds too (with no margin before it on a short one): the same exit either way
        raise SystemExit(124 if isinstance(e, DeadlineReached) else 1) from None
    text = summary(a, r)
    print(text, flush=True)
    write_out(a.out, "gpu-check-summary.txt", text + "\n")
    write_out(a.out, "gpu-check.json", json.dumps({k: v for k, v in r.items() if k != "ctl_nodes"}, indent=1))


if __name__ == "__main__":
    main()
