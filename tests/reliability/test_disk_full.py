"""Check 12: a full disk (a small tmpfs over the directory under test) on a node fetching weights and installing an
engine, and under the store while requests are served: said in the machine's words, nothing half-written under a
final name, and service resumes by itself once space returns."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.agent.installs.recipes import MARKER
from llmgw.agent.weights.local import target_for
from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from tests.agent.installs.archives import llama_archive
from tests.agent.installs.release import Release, release_server
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs, start_cluster
from tests.integration.test_walking_skeleton import chat
from tests.reliability.downloads import ARCHIVE, VERSION, served
from tests.reliability.figures import record
from tests.tools import unavailable


@contextmanager
def small_disk(where: Path, mib: int) -> Iterator[Path]:
    """A tmpfs of `mib` MiB over `where` (what was there is copied in first); unmounted at the end."""
    keep = where.with_name(where.name + ".before")
    where.mkdir(parents=True, exist_ok=True)
    where.rename(keep)
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0755", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        where.rmdir()
        keep.rename(where)
        unavailable(f"cannot mount a tmpfs ({done.stderr.strip()}): the test must run as root")
    try:
        subprocess.run(["cp", "-a", f"{keep}/.", str(where)], check=True)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """A file taking all but `leave` bytes of the disk's free space (all of it, if others write meanwhile)."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f:
        left = st.f_bavail * st.f_frsize - leave
        block = b"\0" * (1 << 20)
        try:
            while left > 0:
                left -= f.write(block[: min(left, len(block))])
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    return filler


def node_disk_full(tmp_path: Path, running: list[Cluster], install: bool) -> None:
    """install: the node must install its engine, onto a disk already full; else the engine is there, and the disk
    fills up while the weights arrive (trickled)."""
    archive = llama_archive(VERSION) if install else b""
    weights = b"GGUF" + os.urandom(3 * 1024 * 1024)
    rel = Release(files={ARCHIVE: archive, "w.gguf": weights}, trickle={} if install else {"w.gguf": 0.001})
    with release_server(rel) as srv:
        source, model = served(srv, archive, weights)
        p = plan(tmp_path, [NodePlan(id="full01", address=loopback(), kind="cpu", gpus=0,
                                     port_range=engine_ports(), agent_extra={"engines": {}} if install else {})],
                 [model], heartbeat_interval="0.5s", reconcile_interval="0.3s",
                 extra_server={"engines": ["sim", source]} if install else {})
        node = p.workdir / "nodes" / "full01"
        need = len(archive) * 4 + len(weights) * 2 + (24 << 20)
        with small_disk(node, need >> 20) as disk:
            filler = fill(disk, 512 * 1024) if install else None  # half a MiB: less than the archive
            c = Cluster(p)
            running.append(c)
            c.start()
            weights_file = target_for(node / "weights", srv.url("w.gguf"))
            engines = node / "state" / "engines" / "llamacpp"

            def installed() -> bool:
                return not install or (engines.exists() and any(engines.glob(f"*/{MARKER}")))

            def said_full() -> str:
                text = json.dumps([admin_get(p, "/api/replicas"), admin_get(p, "/api/nodes")])
                return text if "DiskFull" in text and "No space left on device" in text else ""

            try:
                wait_until(lambda: admin_up(p), 20, "control plane up")
                if filler is None:
                    wait_until(lambda: sum(f.stat().st_size for f in (node / "weights").rglob("*.part")) > 256 << 10,
                               30, "the weights arriving")
                    filler = fill(disk, 0)
                shown = wait_until(said_full, 60, "the full disk reported as DiskFull, in the node's words")
                assert "full01" in shown
                assert not weights_file.exists(), "a weights file under its final name on a full disk"
                assert not install or not installed(), "an engine marked installed on a full disk"
                filler.unlink()
                freed = time.monotonic()
                wait_until(lambda: weights_file.exists() and installed(), 30,
                           "the weights fetched and the engine installed once space returned")
                resumed = time.monotonic() - freed
                assert weights_file.read_bytes() == weights
                what = "an engine install (8 MB archive) on a full disk" if install else "weights filling the disk"
                record(f"node disk full ({what}): from space returning to all whole (s)", resumed,
                       "3 MiB of weights from a local server")
            except BaseException:
                print(dump_logs(p))
                raise
            finally:
                c.stop()


def test_an_engine_install_on_a_full_disk_says_so_corrupts_nothing_and_resumes(
    tmp_path: Path, running: list[Cluster]
) -> None:
    node_disk_full(tmp_path, running, install=True)


def test_a_disk_filling_up_mid_download_says_so_corrupts_nothing_and_resumes(
    tmp_path: Path, running: list[Cluster]
) -> None:
    node_disk_full(tmp_path, running, install=False)


SIM = {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1, "sim": {"tokens": 2}},
       "scaling": {"min": 1, "max": 1}}


def test_the_store_disk_full_keeps_usage_and_the_database_and_resumes(tmp_path: Path, running: list[Cluster]) -> None:
    p = plan(tmp_path, [NodePlan(id="s1", address=loopback(), gpus=1, port_range=engine_ports())], [SIM],
             heartbeat_interval="0.5s", reconcile_interval="0.3s",
             extra_server={"router": {"usage_flush_interval": "0.2s"}})
    state = p.workdir / "state"
    with small_disk(state, 64) as disk:
        c = start_cluster(p, running)
        try:
            wait_until(lambda: any(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]), 30,
                       "the replica ready")
            key = admin_post(p, "/api/keys", {"name": "billed"})["key"]
            assert chat(p, key, "m")[0] == 200
            wait_until(lambda: _requests(p) == 1, 20, "the first request's usage recorded")
            filler = fill(disk, 0)
            served = 1
            for _ in range(20):
                status, _ = chat(p, key, "m")  # the engine answers whatever the store's disk says
                assert status == 200
                served += 1
            wait_until(lambda: _unflushed(p) > 0, 20, "the usage not yet in the store shown in /metrics")
            wait_until(lambda: _logged(p, "No space left on device") or _logged(p, "database or disk is full"), 20,
                       "the full disk said in the server's log")
            filler.unlink()
            freed = time.monotonic()
            wait_until(lambda: _requests(p) == served, 30, f"all {served} requests' usage recorded")
            record("store disk full: from space returning to every request's usage recorded (s)",
                   time.monotonic() - freed, "20 requests served while full; usage flushed every 0.2 s")
            assert _requests(p) == served  # once each: not one more after it settled
            assert _unflushed(p) == 0
        except BaseException:
            print(dump_logs(p))
            raise
        finally:
            c.stop()
        db = sqlite3.connect(disk / "llmgw.db")
        try:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        finally:
            db.close()


def _requests(p: ClusterPlan) -> int:
    rows = admin_get(p, "/api/usage?by=key&since=3600")["rows"]
    return sum(int(r["requests"]) for r in rows if r.get("name") == "billed")


def _unflushed(p: ClusterPlan) -> float:
    req = urllib.request.Request(p.admin + "/metrics",
                                 headers={"Authorization": f"Bearer {p.token_file.read_text().strip()}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("llmgw_usage_unflushed "):
                return float(line.split()[1])
    raise AssertionError("llmgw_usage_unflushed is not in /metrics")


def _logged(p: ClusterPlan, words: str) -> bool:
    return any(words in f.read_text(errors="replace") for f in (p.workdir / "logs").glob("*.log"))
