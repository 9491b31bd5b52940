"""Usage is what operators bill from: every request that reached an engine is recorded exactly once, whatever the
store, the workers or the server itself do. Real server processes, a real lock held by another process, real
SIGTERM and SIGKILL."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs

MODEL = {"name": "m", "source": "org/m", "engine": "sim",
         "profile": {"gpus_per_shard": 1, "sim": {"tokens": 3, "tokens_per_second": 200}},
         "scaling": {"min": 1, "max": 1}}


def chat(p: ClusterPlan, key: str, timeout: float = 30) -> tuple[int, float]:
    """(status, seconds); status 0 when the connection broke."""
    status, seconds, _ = chat_usage(p, key, timeout)
    return status, seconds


def chat_usage(p: ClusterPlan, key: str, timeout: float = 30) -> tuple[int, float, tuple[int, int]]:
    """(status, seconds, the (prompt, completion) tokens the answer said it used); status 0 when the connection
    broke."""
    req = urllib.request.Request(
        p.api + "/v1/chat/completions",
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Connection": "close"},
    )
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            usage = json.loads(r.read())["usage"]
            return r.status, time.monotonic() - t0, (usage["prompt_tokens"], usage["completion_tokens"])
    except urllib.error.HTTPError as e:
        return e.code, time.monotonic() - t0, (0, 0)
    except (urllib.error.URLError, OSError, ValueError):
        return 0, time.monotonic() - t0, (0, 0)


class Row(NamedTuple):
    id: str | None
    status: int
    prompt_tokens: int
    completion_tokens: int


def rows(p: ClusterPlan, key_id: str) -> list[Row]:
    """One per recording, by the usage id the router gave the request (not the table's own row number, which is
    new for every row and so could never show a request recorded twice)."""
    with sqlite3.connect(p.workdir / "state" / "llmgw.db") as db:
        return [Row(*r) for r in db.execute(
            "SELECT id, status, prompt_tokens, completion_tokens FROM usage WHERE key_id = ?", (key_id,))]


def recorded_once(recorded: list[Row]) -> None:
    ids = [r.id for r in recorded]
    assert None not in ids, "a usage row without its request's id"
    assert len(ids) == len(set(ids)), "a request recorded twice"


def up(p: ClusterPlan, extra: dict[str, Any] | None = None) -> tuple[Cluster, str, str]:
    c = Cluster(p)
    c.start()
    wait_until(lambda: admin_up(p), 20, "control plane up")
    wait_until(lambda: any(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]), 30, "m ready")
    made = admin_post(p, "/api/keys", {"name": "billing"})
    return c, made["key"], made["id"]


def metric(p: ClusterPlan, name: str) -> float | None:
    token = p.workdir / "state" / "admin.token"
    auth = {"Authorization": f"Bearer {token.read_text().strip()}"} if token.exists() else {}
    req = urllib.request.Request(p.admin + "/metrics", headers=auth)
    with urllib.request.urlopen(req, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def test_a_store_locked_by_another_process_delays_usage_but_loses_none_and_blocks_no_request(
    tmp_path: Path, running: list[Cluster]
) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [MODEL],
             heartbeat_interval="0.3s", reconcile_interval="0.2s")
    c, key, key_id = up(p)
    running.append(c)
    try:
        locker = subprocess.Popen(
            [sys.executable, "-c", "import sqlite3, sys, time\n"
             f"db = sqlite3.connect({str(p.workdir / 'state' / 'llmgw.db')!r}, isolation_level=None)\n"
             "db.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(8); db.execute('COMMIT')"],
            stdout=subprocess.PIPE, text=True,
        )
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        results = [chat(p, key) for _ in range(40)]  # all while the store cannot be written
        unflushed = metric(p, "llmgw_usage_unflushed")  # the backlog is visible while it lasts
        locker.wait(20)
        assert [s for s, _ in results] == [200] * 40
        assert max(t for _, t in results) < 2.0, "a request waited on the store"
        wait_until(lambda: len(rows(p, key_id)) == 40, 30, "every request recorded once the lock is gone")
        recorded_once(rows(p, key_id))
        assert unflushed is not None and unflushed > 0, f"llmgw_usage_unflushed was {unflushed} during the lock"
        assert metric(p, "llmgw_usage_unflushed") == 0
    except BaseException:
        print(dump_logs(p))
        raise


def test_several_workers_stopping_record_each_request_once(tmp_path: Path, running: list[Cluster]) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [MODEL],
             heartbeat_interval="0.3s", reconcile_interval="0.2s", extra_server={"api_workers": 3})
    c, key, key_id = up(p)
    running.append(c)
    try:
        statuses: list[int] = []

        def load() -> None:
            for _ in range(30):
                statuses.append(chat(p, key)[0])

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        server = c.procs["server"]
        workers = worker_pids(server.pid)
        assert len(workers) == 2
        c.stop_process("server", signal.SIGTERM, timeout=30)  # graceful: workers report their last batches
        recorded = rows(p, key_id)
        recorded_once(recorded)
        assert len(recorded) == statuses.count(200) == 120
        assert {(r.status, r.prompt_tokens, r.completion_tokens) for r in recorded} == {(200, 1, 3)}
        # and a server killed outright takes its workers with it
        c.start_server()
        wait_until(lambda: admin_up(p), 20, "control plane up again")
        workers = wait_until(lambda: len(w := worker_pids(c.procs["server"].pid)) == 2 and w, 20, "two workers")
        c.stop_process("server", signal.SIGKILL)
        wait_until(lambda: not any(Path(f"/proc/{w}").exists() and not _zombie(w) for w in workers), 10,
                   "workers gone with their server")
    except BaseException:
        print(dump_logs(p))
        raise


def test_a_killed_server_loses_no_request_its_clients_saw_complete(tmp_path: Path, running: list[Cluster]) -> None:
    """The crash window: none for whether a request is recorded (it is journaled before it is sent to an engine),
    none for the outcome of an answer the client has whole (a whole, not streamed, answer is journaled before it
    goes out). Only a request in flight at the crash may be recorded with status 0 (outcome unknown) and the
    tokens of none."""
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [MODEL],
             heartbeat_interval="0.3s", reconcile_interval="0.2s")
    c, key, key_id = up(p)
    running.append(c)
    clients = 4
    try:
        answers: list[tuple[int, tuple[int, int]]] = []
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                status, _, used = chat_usage(p, key, timeout=5)
                answers.append((status, used))

        threads = [threading.Thread(target=load) for _ in range(clients)]
        for t in threads:
            t.start()
        wait_until(lambda: sum(1 for s, _ in answers if s == 200) >= 40, 30, "traffic flowing")
        c.stop_process("server", signal.SIGKILL)
        stop.set()
        for t in threads:
            t.join(30)
        completed = [used for s, used in answers if s == 200]
        assert set(completed) == {(1, 3)}, set(completed)  # what each completed answer said it used
        c.start_server()
        wait_until(lambda: admin_up(p), 20, "control plane up again")
        wait_until(lambda: sum(1 for r in rows(p, key_id) if r.status == 200) >= len(completed), 30,
                   f"all {len(completed)} requests the clients saw complete recorded ok")
        recorded = rows(p, key_id)
        recorded_once(recorded)
        ok = [r for r in recorded if r.status == 200]
        unknown = [r for r in recorded if r.status == 0]
        assert len(ok) + len(unknown) == len(recorded), recorded  # nothing else happened to these requests
        assert len(recorded) <= len(answers), (len(recorded), len(answers))  # none recorded more than once
        # every request a client saw complete is recorded ok with its tokens; beyond those, only the requests in
        # flight at the crash (one per client), which the engine may have finished as the server died
        assert {(r.prompt_tokens, r.completion_tokens) for r in ok} == {(1, 3)}, ok
        assert len(completed) <= len(ok) <= len(completed) + clients, (len(completed), len(ok))
        assert len(unknown) <= clients and all(r.prompt_tokens == r.completion_tokens == 0 for r in unknown), unknown
    except BaseException:
        print(dump_logs(p))
        raise


def worker_pids(server: int) -> list[int]:
    out = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == server and b"router-worker" in cmd:
            out.append(int(d.name))
    return out


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


