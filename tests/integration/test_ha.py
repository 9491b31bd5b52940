"""Three `llmgw server` processes on one real PostgreSQL database, two simulated nodes whose agents know all three,
the sim engine, a short lease. The leader is killed (SIGKILL), or paused past its lease (SIGSTOP) and woken, under
steady traffic through the other servers: a new leader takes over within the lease, nothing is declared lost,
restarted or placed again, and the requests keep being answered."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan
from llmgw.store.postgres import PostgresStore
from tests.harness import free_port, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.pg import PASSWORD, Postgres

LEASE = 3.0
MODEL = {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1, "sim": {"tokens": 3}},
         "scaling": {"min": 2, "max": 2}}


class Three:
    def __init__(self, p: ClusterPlan, c: Cluster, ports: list[tuple[int, int, int]], dsn: str) -> None:
        self.p, self.c, self.ports, self.dsn = p, c, ports, dsn
        self.alive = [0, 1, 2]

    def admin(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i][2]}"

    def api(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i][1]}"

    def get(self, i: int, path: str) -> Any:
        req = urllib.request.Request(self.admin(i) + path, headers={
            "Authorization": f"Bearer {self.p.token_file.read_text().strip()}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def leaders(self) -> list[int]:
        out = []
        for i in self.alive:
            try:
                if self.get(i, "/health")["leader"]["leading"]:
                    out.append(i)
            except (urllib.error.URLError, OSError):
                pass
        return out

    def name(self, i: int) -> str:
        return "server" if i == 0 else f"server{i}"


def three_servers(tmp_path: Path, running: list[Cluster], postgres: Postgres) -> Three:
    dsn = postgres.fresh_db()
    (tmp_path / "pg.password").write_text(PASSWORD + "\n")
    ports = [(free_port(), free_port(), free_port()) for _ in range(3)]  # agents, API, admin
    control = [f"https://127.0.0.1:{a}" for a, _, _ in ports]
    nodes = [NodePlan(id=f"node0{i + 1}", address=loopback(), gpus=2, port_range=engine_ports(),
                      agent_extra={"control_planes": control}) for i in range(2)]
    p = plan(tmp_path, nodes, [MODEL], heartbeat_interval="0.3s", reconcile_interval="0.2s", node_lost_after="6s",
             extra_server={"store": {"kind": "postgres", "dsn": dsn, "password_file": "pg.password",
                                     "path": "state/llmgw.db"}, "leader_lease": f"{LEASE}s"})
    # server.yaml is the first's; the others listen elsewhere and journal usage apart, sharing the token file
    first = yaml.safe_load((tmp_path / "server.yaml").read_text())
    first.update(agent_listen=f"127.0.0.1:{ports[0][0]}", api_listen=f"127.0.0.1:{ports[0][1]}",
                 admin_listen=f"127.0.0.1:{ports[0][2]}")
    (tmp_path / "server.yaml").write_text(yaml.safe_dump(first, sort_keys=False))
    for i in (1, 2):
        other = {**first, "agent_listen": f"127.0.0.1:{ports[i][0]}", "api_listen": f"127.0.0.1:{ports[i][1]}",
                 "admin_listen": f"127.0.0.1:{ports[i][2]}", "usage_journal_dir": f"state/journal-{i}"}
        (tmp_path / f"server{i}.yaml").write_text(yaml.safe_dump(other, sort_keys=False))
    c = Cluster(p)
    running.append(c)
    t = Three(p, c, ports, dsn)
    c.start_server()
    wait_until(lambda: t.leaders() == [0], 20, "the first server up and leading")
    for i in (1, 2):
        c.start_server(tmp_path / f"server{i}.yaml", t.name(i))
    for n in p.nodes:
        c.start_agent(n.id)
    try:
        wait_until(lambda: all(any(r["state"] == "ready" for r in t.get(i, "/api/status")["replicas"]) and
                               sum(r["state"] == "ready" for r in t.get(i, "/api/status")["replicas"]) == 2
                               for i in range(3)), 40, "two replicas of m ready, as every server sees them")
    except AssertionError:
        print(dump_logs(p))  # which server is not answering, and why, in its own words
        print("==== postgres log\n" + (postgres.dir / "log").read_text(errors="replace")[-3000:])
        raise
    return t


def chat(url: str, key: str) -> int:
    req = urllib.request.Request(url + "/v1/chat/completions", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode())
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return 0


class Traffic:
    """Requests one after another through the given servers, in turn, until stopped: every answer's status."""

    def __init__(self, t: Three, through: list[int], key: str) -> None:
        self.t, self.through, self.key = t, through, key
        self.statuses: list[int] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.done.is_set():
            self.statuses.append(chat(self.t.api(self.through[i % len(self.through)]), self.key))
            i += 1

    def stop(self) -> list[int]:
        self.done.set()
        self.thread.join(30)
        return self.statuses


def shards(t: Three, i: int) -> dict[str, tuple[int | None, int]]:
    """Every shard the nodes run, as seen through server i: replica id -> (engine pid, restarts)."""
    out = {}
    for n in ("node01", "node02"):
        for s in t.get(i, f"/api/nodes/{n}")["report"]["shards"]:
            out[s["replica_id"]] = (s["pid"], s["restarts"])
    return out


def placement(t: Three, i: int) -> dict[str, list[str]]:
    return {r["id"]: sorted(a["node_id"] for a in r["assignments"]) for r in t.get(i, "/api/replicas")}


def test_killing_the_leader_under_traffic(tmp_path: Path, running: list[Cluster], postgres: Postgres) -> None:
    t = three_servers(tmp_path, running, postgres)
    try:
        key = json.loads(urllib.request.urlopen(urllib.request.Request(
            t.admin(0) + "/api/keys", data=json.dumps({"name": "t"}).encode(), method="POST", headers={
                "Authorization": f"Bearer {t.p.token_file.read_text().strip()}",
                "Content-Type": "application/json"}), timeout=10).read())["key"]
        before_shards, before_placed = shards(t, 1), placement(t, 1)
        assert len(before_placed) == 2
        wait_until(lambda: chat(t.api(1), key) == 200 and chat(t.api(2), key) == 200, 20,
                   "the key known to every server")
        traffic = Traffic(t, [1, 2], key)
        wait_until(lambda: len(traffic.statuses) >= 10, 20, "traffic flowing")
        t.c.stop_process("server", signal.SIGKILL)
        t.alive = [1, 2]
        killed = time.monotonic()
        (new,) = wait_until(lambda: t.leaders() or None, 3 * LEASE, "a new leader")
        took = time.monotonic() - killed
        wait_until(lambda: len(traffic.statuses) >= 50, 30, "traffic after the change")
        statuses = traffic.stop()
        print(f"new leader: server {new} after {took:.2f}s; {len(statuses)} requests, "
              f"{sum(s != 200 for s in statuses)} failed")
        assert took <= LEASE + LEASE / 3 + 1.5, f"a new leader after {took:.1f}s (lease {LEASE}s)"
        assert statuses.count(200) == len(statuses), f"requests failed through the survivors: {statuses}"
        for i in (1, 2):
            nodes = t.get(i, "/api/nodes")
            assert all(n["state"] == "live" for n in nodes), nodes
            assert placement(t, i) == before_placed, "a replica was placed again"
        assert shards(t, new) == before_shards, "a shard was restarted"
        events = t.get(new, "/api/events?limit=200")
        assert not [e for e in events if e.get("kind") == "node" and "lost" in e.get("message", "")], events
        db = PostgresStore(t.dsn, PASSWORD).open()
        try:
            assert len([r for r in db.list_replicas() if r.ready]) == 2
            engines = [(r.endpoint, r.secret) for r in db.list_replicas()]
        finally:
            db.close()
        # then every control plane goes: the agents keep their engines running, and a server started again finds
        # them as they were
        for i in (1, 2):
            t.c.stop_process(t.name(i), signal.SIGKILL)
        t.alive = []
        for n in ("node01", "node02"):

            def alone(n: str = n) -> bool:
                return "no control plane answered" in t.c.log(f"agent-{n}")

            wait_until(alone, 20, f"{n}'s agent finding no control plane")
        for url, secret in engines:  # asked directly, with the replica's engine secret, as routers ask
            req = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {secret}"})
            with urllib.request.urlopen(req, timeout=5) as r:
                assert r.status == 200, f"an engine stopped while no control plane answered: {url}"
        t.c.start_server(tmp_path / "server1.yaml", t.name(1))
        t.alive = [1]
        wait_until(lambda: sum(r["state"] == "ready" for r in t.get(1, "/api/status")["replicas"]) == 2, 30,
                   "both replicas ready again")
        assert placement(t, 1) == before_placed and shards(t, 1) == before_shards, "engines restarted or moved"
    except BaseException:
        print(dump_logs(t.p))
        raise


def test_a_paused_leader_cannot_write_when_it_wakes(tmp_path: Path, running: list[Cluster],
                                                     postgres: Postgres) -> None:
    """SIGSTOP past its lease, then SIGCONT: another server leads meanwhile; the woken one steps down, and the store
    refuses any write fenced at its epoch (what its writes carry), so what it believed cannot reach the store."""
    import os

    from llmgw.core.errors import Deposed
    from llmgw.records.state import ReplicaRecord

    t = three_servers(tmp_path, running, postgres)
    try:
        old_epoch = t.get(0, "/health")["leader"]["epoch"]
        before = placement(t, 1)
        pid = t.c.procs["server"].pid
        os.killpg(pid, signal.SIGSTOP)
        try:
            t.alive = [1, 2]
            (new,) = wait_until(lambda: t.leaders() or None, 3 * LEASE, "a new leader while the old one sleeps")
            new_epoch = t.get(new, "/health")["leader"]["epoch"]
            assert new_epoch > old_epoch
        finally:
            os.killpg(pid, signal.SIGCONT)
        t.alive = [0, 1, 2]
        wait_until(lambda: t.leaders() == [new], 3 * LEASE, "the woken server following")
        db = PostgresStore(t.dsn, PASSWORD).open()
        try:
            stale = ReplicaRecord(id="written-by-the-old-leader", model="m", created_at=0.0, shards_expected=1)
            try:
                db.put_replica(stale, epoch=old_epoch)
                raise AssertionError("the store took a write fenced at a deposed leader's epoch")
            except Deposed:
                pass
            assert sorted(r.id for r in db.list_replicas()) == sorted(before)
        finally:
            db.close()
        log = t.c.log("server")
        refused = log.count("refused a write fenced at epoch")
        print(f"old epoch {old_epoch}, new {new_epoch}; writes the woken server tried and the store refused: "
              f"{refused}")
        for i in range(3):
            assert placement(t, i) == before, f"server {i} sees the replicas placed otherwise"
            assert all(n["state"] == "live" for n in t.get(i, "/api/nodes"))
    except BaseException:
        print(dump_logs(t.p))
        raise
