"""`llmgw ctl keys` against a real control plane: shown once, listed by prefix, revoked; never stored raw."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp

from llmgw.dev.cluster import ClusterPlan
from tests.harness import InProcessServer, plan


async def ctl(p: ClusterPlan, *args: str, token_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "llmgw.cli.main", "ctl", *args, "--admin", p.admin]
    env = {**os.environ, "LLMGW_ADMIN_TOKEN_FILE": str(token_file or p.workdir / "state" / "admin.token"),
           "COLUMNS": "200"}
    env.pop("LLMGW_ADMIN_TOKEN", None)
    return await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=30, env=env)


async def status_with(p: ClusterPlan, key: str) -> int:
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

        kid = listed[0]["id"]
        out = await ctl(p, "keys", "revoke", kid)
        assert out.returncode == 0 and f"revoked 1 key(s): {kid}" in out.stdout
        assert await status_with(p, raw) == 401
        bad = await ctl(p, "keys", "create", "--name", "bob", "--model", "nope")
        assert bad.returncode == 1 and "unknown model(s): nope" in bad.stdout
    logs = "".join(f.read_text(errors="replace") for f in (tmp_path / "logs").glob("*.log")) if (
        tmp_path / "logs").exists() else ""
    assert raw not in logs
    db = b"".join(f.read_bytes() for f in (tmp_path / "state").glob("llmgw.db*"))
    assert db and raw.encode() not in db


async def test_after_a_rotation_revoking_by_name_leaves_no_key_of_that_name_live(tmp_path: Path) -> None:
    """Revoking by name revokes the live key of that name, not the first one ever made (already revoked), so the key
    a rotation made does not stay live."""
    p = plan(tmp_path, [], [])
    async with InProcessServer(p):
        old = (await ctl(p, "keys", "create", "--name", "alice")).stdout.strip().splitlines()[-1]
        new = (await ctl(p, "keys", "create", "--name", "alice")).stdout.strip().splitlines()[-1]
        assert await status_with(p, old) == 200 and await status_with(p, new) == 200
        old_id = next(k["id"] for k in json.loads((await ctl(p, "keys", "list", "--json")).stdout)
                      if old.startswith(k["prefix"]))
        assert (await ctl(p, "keys", "revoke", old_id)).returncode == 0
        assert await status_with(p, old) == 401 and await status_with(p, new) == 200

        # the old API: a name where an id belongs. Either it is refused, or it revokes what is live, never a no-op
        tf = p.workdir / "state" / "admin.token"
        token = tf.read_text().strip() if tf.exists() else ""
        async with aiohttp.ClientSession() as s, s.delete(
            f"{p.admin}/api/keys/alice", headers={"Authorization": f"Bearer {token}"}
        ) as r:
            assert r.status == 404 or await status_with(p, new) == 401

        out = await ctl(p, "keys", "revoke", "--name", "alice")
        assert out.returncode == 0 and "revoked 1 key(s)" in out.stdout, out.stdout + out.stderr
        assert await status_with(p, new) == 401 and await status_with(p, old) == 401
        again = await ctl(p, "keys", "revoke", old_id)
        assert again.returncode == 0 and "already revoked" in again.stdout
