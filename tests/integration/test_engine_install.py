"""A node with no engine installs llama.cpp from a release server (held part way, to watch it mid-download), says so
while it does, and then answers a chat completion from the engine it installed. Real processes throughout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import SMOLLM2, Cluster, NodePlan, admin_get, admin_post, admin_up
from tests.agent.installs.archives import llama_archive, sha256
from tests.agent.installs.release import Release, release_server
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_walking_skeleton import chat

VERSION = "b7"
ARCHIVE = f"llama-{VERSION}-bin-ubuntu-x64.tar.gz"


def ctl_json(p: Any, *args: str) -> Any:
    r = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "ctl", *args, "--json", "--admin", p.admin],
                       capture_output=True, text=True, timeout=30,
                       env={**os.environ, "LLMGW_ADMIN_TOKEN_FILE": str(p.token_file)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_bare_node_installs_llama_cpp_and_serves(tmp_path: Path, running: list[Cluster]) -> None:
    data = llama_archive(VERSION)
    gate = threading.Event()
    with release_server(Release(files={ARCHIVE: data}, hold={ARCHIVE: gate})) as rel:
        source = {"name": "llamacpp", "version": VERSION,
                  "variants": [{"variant": "cpu-x86_64", "url": rel.url(ARCHIVE), "sha256": sha256(data)}]}
        p = plan(
            tmp_path,
            # nothing named in agent.yaml: the node has no engine until it installs one
            [NodePlan(id="bare01", address=loopback(), kind="cpu", gpus=0, port_range=engine_ports(),
                      agent_extra={"engines": {}})],
            [{"name": "smollm2", "source": SMOLLM2, "engine": "llamacpp", "profile": {"memory": "256Mi"},
              "scaling": {"min": 1, "max": 1}}],
            heartbeat_interval="0.5s",
            reconcile_interval="0.3s",
            extra_server={"engines": ["sim", source]},
        )
        c = Cluster(p)
        running.append(c)
        c.start()
        try:
            wait_until(lambda: admin_up(p), 20, "control plane up")
            progress = re.compile(rf"^installing llamacpp {VERSION}: downloading {re.escape(ARCHIVE)}, \d+ kB of "
                                  rf"{len(data) / 1e6:.0f} MB$")

            def installing() -> dict[str, Any] | None:
                rows = {r["node"]: r for r in ctl_json(p, "nodes")}
                row = rows.get("bare01")
                return row if row and any(progress.match(w) for w in row["warnings"]) else None

            row = wait_until(installing, 60, "the node reports its download in progress, in ctl nodes")
            assert "llamacpp b7 cpu-x86_64 (installing)" in row["engines"], row

            def explained() -> dict[str, Any] | None:  # placement's words follow the node's report at the next pass
                (replica,) = ctl_json(p, "explain", "smollm2")["replicas"]
                placement: dict[str, Any] = replica["placement"]
                verdicts = placement["verdicts"]
                return placement if verdicts and progress.match(verdicts[0]["message"]) else None

            placement = wait_until(explained, 30, "explain saying the download in progress")
            assert placement["filtered"] == {"EngineInstalling": 1}, placement
            (verdict,) = placement["verdicts"]
            assert verdict["node_id"] == "bare01", verdict
            words = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "ctl", "explain", "smollm2", "--admin",
                                    p.admin], capture_output=True, text=True, timeout=30,
                                   env={**os.environ, "COLUMNS": "200", "LLMGW_ADMIN_TOKEN_FILE": str(p.token_file)})
            print(words.stdout)
            assert "EngineInstalling: 1 node excluded" in words.stdout
            assert f"bare01: installing llamacpp {VERSION}: downloading {ARCHIVE}, " in words.stdout
            assert not (tmp_path / "nodes" / "bare01" / "state" / "engines" / "llamacpp").exists() or not list(
                (tmp_path / "nodes" / "bare01" / "state" / "engines" / "llamacpp").glob("*/.llmgw-installed.json"))

            gate.set()  # the rest of the archive arrives

            def ready() -> list[dict[str, Any]]:
                return [r for r in admin_get(p, "/api/status")["replicas"] if r["state"] == "ready"]

            (serving,) = wait_until(ready, 120, "the replica Ready on the engine the node installed")
            assert serving["nodes"] == ["bare01"]
            node = admin_get(p, "/api/nodes/bare01")["report"]
            (engine,) = [e for e in node["engines"] if e["name"] == "llamacpp"]
            build = tmp_path / "nodes" / "bare01" / "state" / "engines" / "llamacpp" / f"{VERSION}-cpu-x86_64"
            assert engine["runs"] and engine["path"] == str(build / f"llama-{VERSION}" / "llama-server"), engine
            assert node["install_progress"] == []
            key = admin_post(p, "/api/keys", {"name": "t"})["key"]
            status, body = chat(p, key, "smollm2")
            assert status == 200 and json.loads(body)["choices"][0]["message"]["content"].strip()
            assert [r for r in rel.ranges if r[0] == ARCHIVE] == [(ARCHIVE, "")], "downloaded once"
        except BaseException:
            print(dump_logs(p))
            raise
