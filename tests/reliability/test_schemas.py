"""Check 11: Schemathesis against the router's and the management API's OpenAPI schemas on a real control plane:
no 5xx, every status and content type documented, 401 without a valid credential; each schema is what the code
generates."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.control.http.openapi import openapi as management_schema
from llmgw.dev.cluster import Cluster, NodePlan, admin_get, admin_post
from llmgw.router.openapi import openapi as router_schema
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs, start_cluster
from tests.reliability.figures import record

DOCS = Path(__file__).resolve().parents[2] / "docs"
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,ignored_auth"
MODEL = {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1, "sim": {"tokens": 2}},
         "scaling": {"min": 1, "max": 1}}


def test_the_schemas_in_docs_are_the_ones_the_code_makes() -> None:
    assert json.loads((DOCS / "api.openapi.json").read_text()) == router_schema(), \
        "docs/api.openapi.json is stale: regenerate it from llmgw.router.openapi"
    assert json.loads((DOCS / "management-api.openapi.json").read_text()) == management_schema(), \
        "docs/management-api.openapi.json is stale: regenerate it from llmgw.control.http.openapi"


def schemathesis(schema: Path, url: str, credential: str, out: Path, examples: int) -> tuple[int, str]:
    st = Path(sys.executable).with_name("schemathesis")
    cmd = [str(st), "run", str(schema), "--url", url, "-H", f"Authorization: Bearer {credential}",
           "--checks", CHECKS, "--max-examples", str(examples), "--phases", "examples,coverage,fuzzing",
           "--workers", "1", "--request-timeout", "20", "--seed", "17", "--no-color"]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env, cwd=out)
    return done.returncode, done.stdout + done.stderr


def test_schemathesis_finds_nothing_on_either_api(tmp_path: Path, running: list[Cluster]) -> None:
    p = plan(tmp_path, [NodePlan(id="st1", address=loopback(), gpus=1, port_range=engine_ports())], [MODEL],
             heartbeat_interval="0.5s", reconcile_interval="0.3s")
    start_cluster(p, running)
    try:
        wait_until(lambda: any(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]), 30,
                   "the replica ready")
        key = admin_post(p, "/api/keys", {"name": "fuzz"})["key"]
        token = p.token_file.read_text().strip()
        found = {}
        for name, schema, url, credential, examples in (
            ("router", DOCS / "api.openapi.json", p.api, key, 60),
            ("management", DOCS / "management-api.openapi.json", p.admin, token, 40),
        ):
            rc, said = schemathesis(schema, url, credential, tmp_path, examples)
            tested = next((m.group(0) for m in re.finditer(r"\d+ generated, [^\n]*", said)), "?")
            record(f"schemathesis on the {name} API: exit status", rc, tested.strip())
            if rc != 0:
                found[name] = said[-6000:]
        assert not found, "\n\n".join(f"==== {k}\n{v}" for k, v in found.items())
    except BaseException:
        print(dump_logs(p))
        raise
