"""docs/security.md's operator procedures, run as written against a real control plane: each ```sh block whose
first line is '# recipe: WHAT' is run by bash with `llmgw` as this checkout's CLI, and what it promises is checked
with real requests."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from llmgw.dev.cluster import ClusterPlan
from tests.harness import InProcessServer, plan

pytestmark = pytest.mark.real  # processes: the unit tier leaves this file out (tests/tiers.py)

ROOT = Path(__file__).resolve().parents[2]
SECURITY = ROOT / "docs" / "security.md"


def recipes() -> dict[str, str]:
    """The doc's shell blocks whose first line is '# recipe: WHAT', by WHAT."""
    out = {}
    for b in re.findall(r"```sh\n(.*?)```", SECURITY.read_text(), re.S):
        first, _, _ = b.partition("\n")
        if first.startswith("# recipe:"):
            out[first.removeprefix("# recipe:").strip()] = b
    return out


async def sh(p: ClusterPlan, script: str) -> subprocess.CompletedProcess[str]:
    """`script` under bash, `llmgw` being this checkout's CLI aimed at p's management API with its token."""
    env = {**os.environ, "LLMGW_ADMIN": p.admin, "LLMGW_ADMIN_TOKEN_FILE": str(p.workdir / "state" / "admin.token"),
           "LLMGW_PYTHON": sys.executable, "COLUMNS": "200"}
    env.pop("LLMGW_ADMIN_TOKEN", None)
    shim = 'llmgw() { "$LLMGW_PYTHON" -m llmgw.cli.main "$@"; }\n'
    return await asyncio.to_thread(subprocess.run, ["bash", "-euo", "pipefail", "-c", shim + script],
                                   capture_output=True, text=True, timeout=60, env=env)


async def answers(p: ClusterPlan, key: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(p.api + "/v1/models",
                                                    headers={"Authorization": f"Bearer {key}"}) as r:
        return r.status


def keys_in(out: str) -> list[str]:
    return re.findall(r"^(llmgw-\S+)$", out, re.M)


def test_the_guide_names_its_recipes() -> None:
    assert list(recipes()) == ["rotate alice's API key"]


async def test_rotating_a_key_as_the_guide_says_leaves_the_new_key_live_and_the_old_one_revoked(
        tmp_path: Path) -> None:
    """The defect: the recipe created the new key under the old name, then revoked that name, new key and all."""
    p = plan(tmp_path, [], [])
    async with InProcessServer(p):
        before = await sh(p, "llmgw ctl keys create --name alice")
        assert before.returncode == 0, before.stdout + before.stderr
        [old] = keys_in(before.stdout)
        assert await answers(p, old) == 200

        done = await sh(p, recipes()["rotate alice's API key"])
        assert done.returncode == 0, done.stdout + done.stderr
        [new] = keys_in(done.stdout)
        assert await answers(p, new) == 200, f"the rotation left alice's new key revoked:\n{done.stdout}"
        assert await answers(p, old) == 401, f"the rotation left alice's old key live:\n{done.stdout}"
