"""An engine that served and then stopped answering (SIGSTOP: its socket still accepts, nothing answers) is not
"starting": its replica says since when it has not answered and how many probes it missed, ctl status and the
dashboard show it as unresponsive, and a request for a model whose only replica is in that state is answered 503 at
once with that reason and a Retry-After, not held for load_wait. Once it answers again it serves again."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from llmgw.dev.cluster import Cluster, ClusterPlan, admin_get, admin_post
from tests.harness import wait_until
from tests.integration.conftest import dump_logs
from tests.reliability.test_engine_faults import cluster, engines, model, paused, ready

LOAD_WAIT = 15.0


def status_row(p: ClusterPlan, replica_id: str) -> dict[str, Any] | None:
    return next((r for r in admin_get(p, "/api/status")["replicas"] if r["id"] == replica_id), None)


def chat(p: ClusterPlan, key: str) -> tuple[int, dict[str, Any], dict[str, str], float]:
    """(status, the JSON body, the headers, seconds taken)."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(p.api + "/v1/chat/completions", data=body, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=LOAD_WAIT * 3) as r:
            return r.status, json.loads(r.read()), dict(r.headers), time.monotonic() - started
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers), time.monotonic() - started


def test_a_replica_that_stopped_answering_is_unresponsive_and_its_requests_are_refused_at_once(
    tmp_path: Path, running: list[Cluster]
) -> None:
    p, _ = cluster(tmp_path, running, [model("m", 1)], load_wait=f"{LOAD_WAIT:g}s")
    try:
        (rid,) = wait_until(lambda: ready(p, "m") or None, 30, "the replica ready")
        key = admin_post(p, "/api/keys", {"name": "k"})["key"]
        assert chat(p, key)[0] == 200
        shard = engines(p, "m")[rid]
        with paused(shard["pid"]):
            row = wait_until(lambda: (r := status_row(p, rid)) and r["state"] != "ready" and r, 30,
                             "the replica out of ready")
            assert row["state"] == "unresponsive", row  # it served: not "starting"
            assert row["reason"] == "EngineUnresponsive", row
            assert "not answering since" in row["message"] and "health probes missed" in row["message"], row
            (line,) = admin_get(p, "/api/status")["models"]
            assert line["replicas"] == 1 and line["ready"] == 0 and line["wanted"] == 1, line

            status, body, headers, took = chat(p, key)
            assert status == 503, body
            assert took < LOAD_WAIT / 3, f"held {took:.1f}s for a replica that is not loading (load_wait {LOAD_WAIT}s)"
            assert body["error"]["code"] == "model_not_answering", body
            # the tenant is told it is not answering and where the operator looks; the replica's id and its probes'
            # words are the operator's (the status row above has them)
            said = body["error"]["message"]
            assert said.startswith("no replica of m is answering") and rid not in said and "probe" not in said, body
            assert int(headers["Retry-After"]) > 0
        wait_until(lambda: ready(p, "m") == [rid], 30, "the same replica ready again once it answers")
        assert chat(p, key)[0] == 200
    except BaseException:
        print(dump_logs(p))
        raise
