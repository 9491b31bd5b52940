"""What a node says reaches an operator's terminal as text: no Rich markup, no escape sequences, no crash."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from bench.addresses import engine_port_pair

from llmgw.dev.cluster import ClusterPlan, NodePlan
from tests.harness import InProcessServer, plan
from tests.integration.forger import HostileNode

WARNING = "[/bold] [link=file:///etc/passwd]click[/link] \x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\nFAKE line"


async def ctl(p: ClusterPlan, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "COLUMNS": "300", "LLMGW_ADMIN_TOKEN_FILE": str(p.workdir / "state" / "admin.token")}
    env.pop("FORCE_COLOR", None)  # a pipe: Rich adds no styling of its own, so any escape would be the node's
    argv = [sys.executable, "-m", "llmgw.cli.main", "ctl", *args, "--admin", p.admin]
    return await asyncio.to_thread(subprocess.run, argv, capture_output=True, timeout=30, env=env)


async def test_ctl_nodes_and_events_show_a_hostile_warning_as_harmless_text(tmp_path: Path) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address="127.0.0.1")], [])
    async with InProcessServer(p):
        n = HostileNode(p, "node01", "127.0.0.1", engine_port_pair())
        status, body = await n.heartbeat(problems=[{"code": "FabricProblem", "message": WARNING}])
        assert status == 200, body
        # a change: an event with the text, and a code no llmgw reason has
        await n.heartbeat(problems=[{"code": WARNING[:100], "message": WARNING + "!"}])
        for args in (("nodes",), ("events",)):
            out = await ctl(p, *args)
            assert out.returncode == 0, out.stdout + out.stderr
            text = out.stdout.decode()
            assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, repr(text)
            assert "[/bold]" in text and "click" in text
            assert not any(ln.lstrip("│ ").startswith("FAKE") for ln in text.splitlines())  # no line of its own
