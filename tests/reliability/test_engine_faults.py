"""Checks 5, 6 and 7, on a real cluster of sim engines killed or stopped by signal: a crash-looping engine backs off
and is placed elsewhere; one killed mid-stream ends its stream with an error, unretried and billed once, while one
refusing connections is retried on the other replica; one that never answers (SIGSTOP) is ejected from routing."""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.agent.engines.base import KEY_ENV
from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post
from tests.harness import holds_for, plan, wait_until
from tests.integration.conftest import dump_logs, start_cluster
from tests.reliability.figures import record


def model(name: str, replicas: int, tokens: int = 2, pace: float = 0.0) -> dict[str, Any]:
    sim: dict[str, Any] = {"tokens": tokens}
    if pace:
        sim["tokens_per_second"] = pace
    return {"name": name, "source": f"org/{name}", "engine": "sim", "profile": {"gpus_per_shard": 1, "sim": sim},
            "scaling": {"min": replicas, "max": replicas}}


def cluster(tmp_path: Path, running: list[Cluster], models: list[dict[str, Any]], **kw: Any) -> tuple[ClusterPlan,
                                                                                                        Cluster]:
    nodes = [NodePlan(id=f"f{i}", address=loopback(), gpus=1, port_range=engine_ports()) for i in range(2)]
    server = kw.pop("extra_server", {})  # answers say which replica served them (X-Llmgw-Route): the tests read it
    server["router"] = {**server.get("router", {}), "expose_routing": True}
    p = plan(tmp_path, nodes, models, heartbeat_interval="0.5s", reconcile_interval="0.2s", extra_server=server, **kw)
    return p, start_cluster(p, running)


def engines(p: ClusterPlan, model_name: str) -> dict[str, dict[str, Any]]:
    """replica id -> its shard as its node reports it (node, pid, endpoint, state, restarts, message)."""
    wanted = {r["id"] for r in admin_get(p, "/api/replicas") if r["model"] == model_name}
    out = {}
    for n in admin_get(p, "/api/nodes"):
        for s in admin_get(p, f"/api/nodes/{n['node']}")["report"]["shards"]:
            if s["replica_id"] in wanted:
                out[s["replica_id"]] = {**s, "node": n["node"]}
    return out


@contextmanager
def paused(pid: int) -> Iterator[None]:
    """The process stopped (SIGSTOP) while the block runs, and let go on (SIGCONT) however it ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def ready(p: ClusterPlan, model_name: str) -> list[str]:
    return [r["id"] for r in admin_get(p, "/api/status")["replicas"] if r["model"] == model_name
            and r["state"] == "ready"]


def served_by_engine(shard: dict[str, Any]) -> int:
    """Requests the engine of a shard was asked, by its own count. Its key is the replica's secret, which only its
    agent and the control plane hold; as root the test reads it where the agent put it, the engine's environment
    at its start (the engine drops it from its own at once, but the kernel keeps what it started with)."""
    env = Path(f"/proc/{shard['pid']}/environ").read_bytes().split(b"\0")
    key = next(v.partition(b"=")[2].decode() for v in env if v.startswith(KEY_ENV.encode() + b"="))
    req = urllib.request.Request(shard["endpoint"].rstrip("/") + "/metrics",
                                 headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("sim:requests_total "):
                return int(float(line.split()[1]))
    raise AssertionError(f"no sim:requests_total at {shard['endpoint']}")


def ask(p: ClusterPlan, key: str, name: str, stream: bool = False, timeout: float = 30) -> tuple[int, str, float]:
    """(status, the replica the router says it chose, seconds taken)."""
    body = json.dumps({"model": name, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(p.api + "/v1/chat/completions", data=body, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status, r.headers.get("X-Llmgw-Route", ""), time.monotonic() - started
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("X-Llmgw-Route", ""), time.monotonic() - started


def usage(p: ClusterPlan, key_name: str) -> int:
    rows = admin_get(p, "/api/usage?by=key&since=3600")["rows"]
    return sum(int(r["requests"]) for r in rows if r.get("name") == key_name)


def test_an_engine_killed_mid_stream_ends_the_stream_with_an_error_and_is_not_retried(
    tmp_path: Path, running: list[Cluster]
) -> None:
    p, _ = cluster(tmp_path, running, [model("m", 2, tokens=60, pace=15)])
    try:
        wait_until(lambda: len(ready(p, "m")) == 2, 30, "two replicas ready")
        key = admin_post(p, "/api/keys", {"name": "streamer"})["key"]
        shards = engines(p, "m")
        before = {rid: served_by_engine(s) for rid, s in shards.items()}
        body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
        req = urllib.request.Request(p.api + "/v1/chat/completions", data=body, headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            first = b""
            while not first.startswith(b"data:"):
                first = r.readline()
            route = r.headers.get("X-Llmgw-Route", "")
            rid = next(x for x in shards if f"replica={x}" in route)
            other = next(x for x in shards if x != rid)
            os.kill(shards[rid]["pid"], signal.SIGKILL)  # the engine answering, mid-stream
            killed = time.monotonic()
            rest = r.read()
        ended = time.monotonic() - killed
        assert b"[DONE]" not in rest, rest[-500:]
        events = [json.loads(line[5:]) for line in rest.splitlines() if line.startswith(b"data:")
                  and line[5:].strip().startswith(b"{")]
        assert any("error" in e for e in events), rest[-500:]
        assert served_by_engine(shards[other]) == before[other], "the broken stream was sent again"
        wait_until(lambda: usage(p, "streamer") == 1, 20, "the broken stream's usage recorded")
        holds_for(lambda: usage(p, "streamer") == 1, 2.0, "recorded once, not again")
        record("engine killed mid-stream: from the kill to the client's stream ended with an error (s)", ended,
               "sim engine streaming 15 tokens/s, SIGKILL")
    except BaseException:
        print(dump_logs(p))
        raise


def test_a_replica_that_refuses_connections_is_skipped_and_the_request_answered(
    tmp_path: Path, running: list[Cluster]
) -> None:
    p, c = cluster(tmp_path, running, [model("m", 2)], node_lost_after="30s")
    try:
        wait_until(lambda: len(ready(p, "m")) == 2, 30, "two replicas ready")
        key = admin_post(p, "/api/keys", {"name": "k"})["key"]
        shards = engines(p, "m")
        dead, alive = sorted(shards)
        # the dead engine's agent is paused first, so nobody tells the control plane: the router still lists it
        with paused(c.procs[f"agent-{shards[dead]['node']}"].pid):
            os.kill(shards[dead]["pid"], signal.SIGKILL)
            before = served_by_engine(shards[alive])
            answers = [ask(p, key, "m") for _ in range(8)]
        assert all(status == 200 for status, _, _ in answers), answers
        assert all(f"replica={alive}" in route for _, route, _ in answers), answers
        assert served_by_engine(shards[alive]) == before + 8  # each once, on the live one
        log = (p.workdir / "logs" / "server.log").read_text()
        assert f"replica {dead} not reached" in log, "no request was routed to the dead engine: nothing was shown"
        record("connection refused by a listed replica: requests answered by the other", 8,
               f"8 of 8 answered, slowest {max(t for _, _, t in answers):.2f} s")
    except BaseException:
        print(dump_logs(p))
        raise


def test_a_replica_that_never_answers_is_ejected_and_the_other_stays_fast(
    tmp_path: Path, running: list[Cluster]
) -> None:
    p, _ = cluster(tmp_path, running, [model("m", 2)],
                   extra_server={"router": {"first_byte_timeout": "1s"}})
    try:
        wait_until(lambda: len(ready(p, "m")) == 2, 30, "two replicas ready")
        key = admin_post(p, "/api/keys", {"name": "k"})["key"]
        shards = engines(p, "m")
        bad, good = sorted(shards)
        baseline = [ask(p, key, "m")[2] for _ in range(20)]
        results: list[tuple[int, str, float]] = []
        lock = threading.Lock()
        stop = threading.Event()

        def client() -> None:
            while not stop.is_set():
                got = ask(p, key, "m", timeout=10)
                with lock:
                    results.append(got)

        workers = [threading.Thread(target=client) for _ in range(4)]
        with paused(shards[bad]["pid"]):  # its socket still accepts; nothing answers
            for w in workers:
                w.start()
            try:
                wait_until(lambda: any("ejected from routing" in e.get("message", "")
                                       for e in admin_get(p, "/api/events?limit=50")), 30,
                           "the stuck replica ejected, as an event")
                wait_until(lambda: len(results) > 40, 30, "requests served after the ejection")
            finally:
                stop.set()
                for w in workers:
                    w.join(15)
        on_good = [t for status, route, t in results if status == 200 and f"replica={good}" in route]
        failed = [r for r in results if r[0] != 200]
        base, during = statistics.median(baseline), statistics.median(on_good)
        assert len(on_good) >= 30, results
        assert during <= 2 * base + 0.05, f"the good replica's median went from {base:.3f}s to {during:.3f}s"
        assert all(f"replica={bad}" in route for _, route, _ in failed), failed  # only the stuck one's requests
        assert len(failed) <= 4 + 3, f"{len(failed)} failed: more than the ejection needed"
        events = [e["message"] for e in admin_get(p, "/api/events?limit=50") if "ejected" in e.get("message", "")]
        assert any(bad in m for m in events), events
        record("stuck replica: the other's median latency before / during (ms)", during * 1000,
               f"before {base * 1000:.1f} ms; {len(failed)} requests failed (first_byte_timeout 1 s) before the "
               f"ejection, {len(on_good)} answered by the other")
    except BaseException:
        print(dump_logs(p))
        raise


def test_a_crash_looping_engine_backs_off_says_why_and_its_replica_moves(
    tmp_path: Path, running: list[Cluster]
) -> None:
    """The engine is killed each time it comes up (SIGKILL, as an engine that crashes on start dies): the agent
    restarts it after 1, 2, 4 s (restart_backoff 1 s, doubling) and gives up after max_restarts (3); meanwhile the
    replica is not Ready and says why; then it is placed on the other node, where it comes up Ready."""
    p, _ = cluster(tmp_path, running, [model("c", 1)])
    try:
        wait_until(lambda: len(ready(p, "c")) == 1, 30, "the replica ready")
        first = engines(p, "c")
        (rid, shard), = first.items()
        node = shard["node"]
        starts: list[float] = []
        killed: set[int] = set()
        reasons: set[str] = set()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            s = engines(p, "c").get(rid)
            if s is None or s["state"] == "failed":
                break
            if s["pid"] and s["pid"] not in killed and s["state"] in ("starting", "running", "ready"):
                killed.add(s["pid"])
                starts.append(time.monotonic())
                os.kill(s["pid"], signal.SIGKILL)
            if len(killed) > 1:
                rep = next((r for r in admin_get(p, "/api/status")["replicas"] if r["id"] == rid), None)
                if rep is not None:
                    assert rep["state"] != "ready" or s["state"] == "ready", rep
                    reasons.add(json.dumps(rep))
            time.sleep(0.05)
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert len(killed) == 4, f"{len(killed)} engines started before the agent gave up: {gaps}"
        assert gaps[1] >= gaps[0] and gaps[2] >= 2 * gaps[0], f"restarts did not back off: {gaps}"
        assert any("exited" in r or "EngineExited" in r for r in reasons), reasons
        failed = wait_until(lambda: [s for s in engines(p, "c").values() if s["state"] == "failed"] or
                            [r for r in admin_get(p, "/api/replicas") if r["id"] == rid and r.get("failed")], 20,
                            "the replica failed")
        said = json.dumps(failed)
        assert "gave up after 3 restarts" in said or "exited" in said, said
        moved = wait_until(lambda: [s for r, s in engines(p, "c").items() if r != rid and s["state"] == "ready"],
                           30, "a new replica ready on another node")
        assert moved[0]["node"] != node, moved
        record("crash loop: restarts after the engine died (s)", gaps[-1], "gaps " + ", ".join(
            f"{g:.1f}" for g in gaps) + " (restart_backoff 1 s doubling, max_restarts 3); then placed elsewhere")
    except BaseException:
        print(dump_logs(p))
        raise
