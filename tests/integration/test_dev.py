"""`llmgw dev` as a person runs it: the banner, a multi-node sim replica in ctl status, real tokens, the banner's
"what else it shows" commands each doing what it says (an adapter answering, a model asleep after its idle time,
a pinned model's priority, GPU time and cost per key), Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.harness import alive, free_port, wait_until


def test_llmgw_dev_serves_and_stops_everything(tmp_path: Path) -> None:
    api, admin, agent = free_port(), free_port(), free_port()
    engine_pids: list[int] = []
    log = tmp_path / "dev.out"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmgw.cli.main", "dev", "--workdir", str(tmp_path / "w"), "--api-port", str(api),
             "--admin-port", str(admin), "--agent-port", str(agent)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        text = wait_until(lambda: (t := log.read_text()) and "ready: smollm2" in t and "ready: sim-405b" in t and t,
                          120, "smollm2 and sim-405b ready")
        key = re.search(r"API key:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        token_file = re.search(r"LLMGW_ADMIN_TOKEN_FILE=(\S+)", text).group(1)  # type: ignore[union-attr]
        env = {**os.environ, "COLUMNS": "200", "LLMGW_ADMIN_TOKEN_FILE": token_file}
        status = subprocess.run(
            [sys.executable, "-m", "llmgw.cli.main", "ctl", "status", "--admin", f"http://127.0.0.1:{admin}"],
            capture_output=True, text=True, timeout=30, env=env,
        ).stdout
        row = next(ln for ln in status.splitlines() if "sim-405b" in ln and "ready" in ln)
        assert re.search(r"node0[12], node0[12]|node0[34], node0[34]", row), row
        body = {"model": "smollm2", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi!"}]}
        req = urllib.request.Request(f"http://127.0.0.1:{api}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.loads(r.read())["choices"][0]["message"]["content"]
        auth = {"Authorization": f"Bearer {Path(token_file).read_text().strip()}"}
        for node in ("node01", "node02", "node03", "node04", "cpu01"):
            node_req = urllib.request.Request(f"http://127.0.0.1:{admin}/api/nodes/{node}", headers=auth)
            with urllib.request.urlopen(node_req, timeout=5) as r:
                engine_pids += [s["pid"] for s in json.loads(r.read())["report"]["shards"] if s["pid"]]
        assert len(engine_pids) >= 3  # llama-server and the two ranks of sim-405b
        showcase(text, env, admin)
    finally:
        os.killpg(proc.pid, signal.SIGINT) if proc.poll() is None else None
        proc.wait(60)
    assert proc.returncode == 0
    assert "stopping every process llmgw dev started" in log.read_text()
    # nothing it started outlives it: not the engines, not any process with its workdir on the command line
    assert [pid for pid in engine_pids if alive(pid)] == []
    leftovers: list[str] = []
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (pid_dir / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(tmp_path / "w") in cmd:
            leftovers.append(cmd.replace("\0", " "))
    assert leftovers == []


def showcase(text: str, env: dict[str, str], admin: int) -> None:
    """Each command the banner lists under "What else it shows", run as a person pastes it (`llmgw` on the PATH,
    the operator token exported as the banner says), and what it shows."""
    part = text.split("What else it shows", 1)[1].split("First request", 1)[0]
    commands = [ln.strip() for ln in part.splitlines() if ln.startswith("    ")]
    assert len(commands) == 5, commands
    env = {**env, "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
           "LLMGW_ADMIN": f"http://127.0.0.1:{admin}"}

    def run(cmd: str) -> str:
        r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, (cmd, r.stdout, r.stderr)
        return r.stdout

    adapter, wake, status, explain, usage = commands
    assert json.loads(run(adapter))["choices"][0]["message"]["content"]  # the adapter, served by the real engine
    assert json.loads(run(wake))["model"] == "sim-8b"  # loaded on demand for this request
    assert "priority 500, pinned" in run(explain)  # the pinned model's priority
    wait_until(lambda: any("sim-8b" in ln and "sleeping" in ln for ln in run(status).splitlines()), 90,
               "sim-8b asleep after its idle time (ctl status)")
    rows = wait_until(lambda: (out := run(usage)) and "dev" in out and re.search(r"\d+\.\d+", out) and out, 90,
                      "GPU time in ctl usage")
    line = next(ln for ln in rows.splitlines() if " dev " in f" {ln} ")
    assert re.search(r"[1-9]\d*\.\d+", line), rows  # some GPU-seconds, charged to the dev key
