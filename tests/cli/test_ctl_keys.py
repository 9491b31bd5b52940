"""`llmgw ctl keys` against a real control plane: shown once, listed by prefix, revoked; never stored raw."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import aiohttp

from tests.harness import InProcessServer, plan


async def ctl(p, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    argv = [sys.executable, "-m", "llmgw.cli.main", "ctl", *args, "--admin", p.admin]
    return await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=30)


async def status_with(p, key: str) -> int:  # type: ignore[no-untyped-def]
    async with aiohttp.ClientSession() as s, s.get(p.api + "/v1/models",
                                                    headers={"Authorization": f"Bearer {key}"}) as r:
        return r.status


async def test_create_list_revoke(tmp_path: Path) -> None:
    p = plan(tmp_path, [], [{"name": "m", "source": "org/m", "engine": "sim", "scaling": {"min": 0, "max": 1}}])
    async with InProcessServer(p):
        made = await ctl(p, "keys", "create", "--name", "alice", "--model", "m")
        assert made.returncode == 0, made.stderr
        raw = made.stdout.strip().splitlines()[-1]
        assert raw.startswith("llmgw-")
        assert await status_with(p, raw) == 200

        listed = json.loads((await ctl(p, "keys", "list", "--json")).stdout)
        assert [(k["name"], k["models"], k["revoked_at"]) for k in listed] == [("alice", ["m"], None)]
        assert raw.startswith(listed[0]["prefix"]) and raw != listed[0]["prefix"]
        assert "hash" not in listed[0] and raw not in json.dumps(listed)

        assert (await ctl(p, "keys", "revoke", "alice")).returncode == 0
        assert await status_with(p, raw) == 401
        bad = await ctl(p, "keys", "create", "--name", "bob", "--model", "nope")
        assert bad.returncode == 1 and "unknown model(s): nope" in bad.stdout
    logs = "".join(f.read_text(errors="replace") for f in (tmp_path / "logs").glob("*.log")) if (
        tmp_path / "logs").exists() else ""
    assert raw not in logs
    db = b"".join(f.read_bytes() for f in (tmp_path / "state").glob("llmgw.db*"))
    assert db and raw.encode() not in db
