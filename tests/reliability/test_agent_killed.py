"""Check 8: the agent killed (SIGKILL, with everything it started) 20 times while it downloads a model's weights
and installs an engine, each kill after the downloads moved on: after every kill, a file or an engine under its
final name is whole (the served bytes; every file of the archive, marked installed), and in the end both are."""

from __future__ import annotations

import io
import os
import signal
import tarfile
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.agent.installs.recipes import MARKER
from llmgw.agent.weights.local import target_for
from llmgw.dev.cluster import Cluster, NodePlan, admin_up
from tests.agent.installs.archives import llama_archive
from tests.agent.installs.release import Release, release_server
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.reliability.downloads import ARCHIVE, VERSION, served
from tests.reliability.figures import record

KILLS = 20


def members(archive: bytes) -> dict[str, int]:
    """Regular files of the archive, by path, with their sizes (an install keeps the archive's layout)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as t:
        return {m.name: m.size for m in t.getmembers() if m.isreg()}


def test_an_agent_killed_twenty_times_mid_download_leaves_only_whole_files_and_installs(
    tmp_path: Path, running: list[Cluster]
) -> None:
    archive = llama_archive(VERSION)
    weights = b"GGUF" + os.urandom(3 * 1024 * 1024)
    files = members(archive)
    rel = Release(files={ARCHIVE: archive, "w.gguf": weights}, trickle={ARCHIVE: 0.0005, "w.gguf": 0.0005})
    with release_server(rel) as srv:
        source, model = served(srv, archive, weights)
        p = plan(tmp_path, [NodePlan(id="kill01", address=loopback(), kind="cpu", gpus=0,
                                     port_range=engine_ports(), agent_extra={"engines": {}})],
                 [model], heartbeat_interval="0.5s", reconcile_interval="0.3s",
                 extra_server={"engines": ["sim", source]})
        c = Cluster(p)
        running.append(c)
        c.start()
        node = p.workdir / "nodes" / "kill01"
        weights_file = target_for(node / "weights", srv.url("w.gguf"))
        engines = node / "state" / "engines" / "llamacpp"

        def installed() -> bool:
            return engines.exists() and any(engines.glob(f"*/{MARKER}"))

        def arrived() -> int:
            return sum(f.stat().st_size for f in node.rglob("*") if f.is_file() and not f.is_symlink()
                       and (f.name.endswith(".part") or f == weights_file or f.name == ARCHIVE))

        def whole() -> list[str]:
            """What is under a final name and not whole (empty: all is well)."""
            wrong = []
            if weights_file.exists() and weights_file.read_bytes() != weights:
                wrong.append(f"{weights_file} is not the served file ({weights_file.stat().st_size} bytes)")
            for d in engines.glob("*") if engines.exists() else []:
                if not (d / MARKER).exists():
                    continue  # an attempt, not an install: never used
                have = {str(f.relative_to(d)): f.stat().st_size for f in d.rglob("*")
                        if f.is_file() and not f.is_symlink() and f.name != MARKER}
                if have != files:
                    extra = {k: v for k, v in have.items() if files.get(k) != v}
                    missing = {k: v for k, v in files.items() if have.get(k) != v}
                    wrong.append(f"{d} is marked installed, but has {extra} where the archive has {missing}")
            return wrong

        try:
            wait_until(lambda: admin_up(p), 20, "control plane up")
            kills = 0
            while kills < KILLS:
                seen = arrived()
                if weights_file.exists() and installed():
                    break

                def moved_on(seen: int = seen) -> bool:
                    return arrived() >= seen + 64 * 1024 or (weights_file.exists() and installed())

                wait_until(moved_on, 30, "the downloads moving on")
                c.stop_process("agent-kill01", signal.SIGKILL)  # the agent and everything it started
                kills += 1
                assert not whole(), whole()
                c.start_agent("kill01")
            record("agent killed mid-download and mid-install: kills before both were whole", kills,
                   f"{len(weights) >> 20} MiB of weights and a {len(archive) >> 20} MiB engine archive, trickled")
            wait_until(lambda: weights_file.exists() and installed(), 120,
                       "the weights fetched and the engine installed")
            assert not whole(), whole()
            assert kills >= 10, f"only {kills} kills landed before the downloads finished: slow the trickle down"
        except BaseException:
            print(dump_logs(p))
            raise
        finally:
            c.stop()
