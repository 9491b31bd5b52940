"""The servers of bench.heartbeats: certificates, configs, `llmgw server` processes (from this tree or another's src)
on SQLite or PostgreSQL, and what /proc says of their CPU and memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from bench.addresses import free_port
from llmgw.pki.ca import init_ca, issue

TICK = os.sysconf("SC_CLK_TCK")


def certificates(workdir: Path, n: int) -> Path:
    pki = workdir / "pki"
    if not (pki / "ca.crt").exists():
        init_ca(pki)
    if not (pki / "controlplane.crt").exists():
        issue(pki, "controlplane", ips=["127.0.0.1"], server=True)
    t0 = time.monotonic()
    made = 0
    for i in range(n):
        if not (pki / f"n{i:05d}.crt").exists():
            issue(pki, f"n{i:05d}")
            made += 1
    if made:
        print(f"issued {made} node certificates in {time.monotonic() - t0:.0f}s", flush=True)
    return pki


def server_configs(workdir: Path, servers: int, store: dict[str, Any], interval: float) -> list[tuple[Path, int, int]]:
    """(config, agent port, admin port) per server."""
    out = []
    for k in range(servers):
        agent, api, admin = free_port(), free_port(), free_port()
        cfg = {
            "agent_listen": f"127.0.0.1:{agent}", "api_listen": f"127.0.0.1:{api}",
            "admin_listen": f"127.0.0.1:{admin}",
            "tls": {"ca": "pki/ca.crt", "cert": "pki/controlplane.crt", "key": "pki/controlplane.key"},
            "store": store, "admin_token_file": "state/admin.token", "usage_journal_dir": f"state/journal-{k}",
            "heartbeat_interval": f"{interval}s", "node_lost_after": f"{6 * interval}s", "reconcile_interval": "1s",
            "node_networks": ["10.0.0.0/8"],  # the addresses the simulated nodes claim (they all dial from loopback)
            "models": [{"name": "m", "source": "org/m", "engine": "sim", "scaling": {"min": 0, "max": 1}}],
        }
        path = workdir / f"server-{k}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        out.append((path, agent, admin))
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(ln.split()[1] for ln in status if ln.startswith("VmRSS:"))) // 1024


def up(admin: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/health", timeout=2) as r:
            return int(r.status) == 200
    except OSError:
        return False


@contextmanager
def store_for(workdir: Path, kind: str, servers: int) -> Iterator[dict[str, Any]]:
    """The servers' store section: a SQLite file, or a fresh database on a PostgreSQL of the bench's own."""
    if kind != "postgres":
        if servers > 1:
            raise SystemExit("several servers need --store postgres (a SQLite file is one server's)")
        yield {"path": "state/llmgw.db"}
        return
    from bench.postgres import MISSING, PASSWORD, Postgres, binaries

    found = binaries()
    if found is None:
        raise SystemExit(MISSING)
    pg = Postgres(found).start()
    try:
        (workdir / "pg.password").write_text(PASSWORD + "\n")
        yield {"kind": "postgres", "dsn": pg.fresh_db(), "password_file": "pg.password", "path": "state/llmgw.db"}
    finally:
        pg.stop()


@contextmanager
def running(workdir: Path, configs: list[tuple[Path, int, int]], src: str | None,
            profile: bool) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The servers, each up (its /health answers); `src`: the llmgw sources they run (another tree's src)."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), env.get("PYTHONPATH", "")])
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for k, (path, _, admin) in enumerate(configs):
            with (workdir / f"server-{k}.log").open("wb") as log:
                prof = ["-m", "cProfile", "-o", str(workdir / f"server-{k}.prof")] if profile else []
                argv = [sys.executable, *prof, "-m", "llmgw.cli.main", "server", "-c", str(path)]
                procs.append(subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, env=env,
                                              start_new_session=True))
            deadline = time.monotonic() + 60
            while not up(admin):
                if time.monotonic() > deadline or procs[-1].poll() is not None:
                    raise SystemExit(f"server {k} did not come up: see {workdir / f'server-{k}.log'}")
                time.sleep(0.2)  # polling /health with a deadline: the server says nothing else when it is up
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    if profile:
        import pstats

        for k in range(len(configs)):
            print(f"== server {k}, its main thread by cumulative time")
            pstats.Stats(str(workdir / f"server-{k}.prof")).sort_stats("cumulative").print_stats(40)
