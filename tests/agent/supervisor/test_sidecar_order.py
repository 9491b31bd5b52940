"""Sidecars with real processes: started and ready before the engine, stopped after it; one that exits or never
gets ready fails its shard with its words (SidecarFailed)."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

from llmgw.agent.engines import Launch
from llmgw.agent.engines.base import Loopback
from llmgw.agent.supervisor import Supervisor, sidecars
from llmgw.agent.supervisor.supervisor import Resolver, RestartPolicy
from llmgw.core.clock import FakeClock
from llmgw.core.reasons import Reason
from llmgw.wire.messages import ShardSpec, ShardState
from llmgw.wire.serving import SidecarSpec
from tests.harness import await_until, free_port

DEADLINE_S = 60.0  # a process start and a sim engine's load on a machine running every other test at once

# The sidecar: records when it started, becomes ready (serves /ready on its port) only once the test says "go",
# exits with words once it says "die" (mode "exit"), never binds its port in mode "never", and on SIGTERM records
# whether the engine was still alive.
SIDECAR = textwrap.dedent("""
    import http.server, os, signal, sys, time
    d, mode = sys.argv[1], sys.argv[2]
    def put(name, text):
        with open(os.path.join(d, name + ".tmp"), "w") as f:
            f.write(text)
        os.replace(os.path.join(d, name + ".tmp"), os.path.join(d, name))
    def alive(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    def bye(*_):
        engine = open(os.path.join(d, "engine.pid")).read() if os.path.exists(os.path.join(d, "engine.pid")) else ""
        put("sidecar.stopped", f"{time.monotonic_ns()} {int(bool(engine) and alive(int(engine)))}")
        os._exit(0)
    signal.signal(signal.SIGTERM, bye)
    put("sidecar.pid", str(os.getpid()))
    while not os.path.exists(os.path.join(d, "go")):
        time.sleep(0.02)
    if mode == "never":
        signal.pause()
    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/ready" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    put("sidecar.ready", str(time.monotonic_ns()))  # before the bind: no probe can succeed before this time
    server = http.server.HTTPServer(("127.0.0.1", int(os.environ["LLMGW_SIDECAR_PORT"])), Ready)
    server.timeout = 0.05
    while not (mode == "exit" and os.path.exists(os.path.join(d, "die"))):
        server.handle_request()
    print("tokenizer: cannot load vocab.json", file=sys.stderr, flush=True)
    sys.exit(3)
""")

# The engine: records when it started, its pid, and the sidecar's port as told, then becomes the sim engine.
ENGINE = textwrap.dedent("""
    import os, sys, time
    d = sys.argv[1]
    open(os.path.join(d, "engine.told"), "w").write(os.environ.get("LLMGW_SIDECAR_TOK_PORT", "") + " " + sys.argv[2])
    open(os.path.join(d, "engine.pid"), "w").write(str(os.getpid()))
    open(os.path.join(d, "engine.started"), "w").write(str(time.monotonic_ns()))
    os.execv(sys.executable, [sys.executable, "-m", "llmgw.sim.engine", *sys.argv[3:]])
""")


def shard(port: int, rec: Path, mode: str, check: Literal["tcp", "http"] = "http", timeout: float = 600.0) -> ShardSpec:
    car = SidecarSpec(name="tok", argv=[sys.executable, str(rec / "sidecar.py"), str(rec), mode], port=True,
                      ready=check, ready_path="/ready" if check == "http" else "", ready_timeout=timeout)
    return ShardSpec(replica_id="r1", model="m", engine="sim", source="org/m", rank=0, world_size=1,
                     serve_port=port, sidecars=[car])


def engine_launch(rec: Path) -> Resolver:
    def resolve(s: ShardSpec, ports: Loopback) -> tuple[Launch | None, str]:
        argv = [sys.executable, str(rec / "engine.py"), str(rec), "--tok={sidecars.tok.port}", "--model", "m",
                "--host", "127.0.0.1", "--port", str(s.serve_port)]
        return Launch(argv=argv, serves_http=True), ""
    return resolve


@asynccontextmanager
async def supervising(tmp: Path, rec: Path, restart: RestartPolicy | None = None,
                      clock: FakeClock | None = None) -> AsyncIterator[Supervisor]:
    rec.mkdir()
    (rec / "sidecar.py").write_text(SIDECAR)
    (rec / "engine.py").write_text(ENGINE)
    s = Supervisor(clock or FakeClock(), tmp / "state", "127.0.0.1", engine_launch(rec), restart=restart)
    try:
        yield s
    finally:
        await s.close()
        for name in ("sidecar.pid", "engine.pid"):  # a failed assertion must leave no process behind
            pid = int((rec / name).read_text() or 0) if (rec / name).exists() else 0
            if pid and _alive(pid):
                os.kill(pid, 9)


async def _state(s: Supervisor) -> ShardState:
    await s.tick()
    return s.states()[0]


def _ns(p: Path) -> int:
    return int(p.read_text().split()[0])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def _held_for_the_sidecar(s: Supervisor, rec: Path) -> ShardState:
    """Once the sidecar runs and was probed unready: the shard says it waits for it, and no engine started."""
    await await_until(lambda: (rec / "sidecar.pid").exists(), DEADLINE_S, "the sidecar started")
    st = await _state(s)
    assert st.state == "starting" and st.reason == Reason.SidecarsStarting and st.pid is None, st
    assert "waiting for sidecar tok to be ready" in st.message, st.message
    assert not (rec / "engine.started").exists(), "the engine started before its sidecar was ready"
    return st


async def test_the_engine_starts_after_its_sidecar_is_ready_and_stops_before_it(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    async with supervising(tmp_path, rec) as s:
        await s.converge([shard(free_port(), rec, "serve")])
        for _ in range(3):  # however often it is asked, the engine waits
            await _held_for_the_sidecar(s, rec)
        (rec / "go").touch()
        await await_until(lambda: _state_is(s, "ready"), DEADLINE_S, lambda: f"the shard ready: {s.states()}")
        assert _ns(rec / "engine.started") > _ns(rec / "sidecar.ready"), "the engine started before the sidecar"
        port = s.shards[("r1", 0)].sidecars.members[0].port  # type: ignore[union-attr]
        assert (rec / "engine.told").read_text() == f"{port} --tok={port}", "env and argument name its port"
        engine = int((rec / "engine.pid").read_text())

        await s.converge([])  # no longer wanted: the engine first, then the sidecar
        assert (rec / "sidecar.stopped").exists(), "the sidecar was not stopped"
        assert (rec / "sidecar.stopped").read_text().split()[1] == "0", "the sidecar was stopped while the engine ran"
        assert not _alive(engine) and not _alive(int((rec / "sidecar.pid").read_text()))
        assert list((tmp_path / "state").glob("*.run")) == [], "its run file outlived it"


async def test_a_sidecar_that_exits_fails_the_shard_with_its_words_and_restarts_it_in_order(tmp_path: Path) -> None:
    rec, clock = tmp_path / "rec", FakeClock()
    async with supervising(tmp_path, rec, clock=clock) as s:
        await s.converge([shard(free_port(), rec, "exit")])
        (rec / "go").touch()
        await await_until(lambda: _state_is(s, "ready"), DEADLINE_S, lambda: f"the shard ready: {s.states()}")
        engine, first = int((rec / "engine.pid").read_text()), (rec / "sidecar.pid").read_text()
        (rec / "die").touch()
        st = await await_until(lambda: _state_is(s, "exited"), DEADLINE_S, lambda: f"the shard exited: {s.states()}")
        assert st.reason == Reason.SidecarFailed
        assert st.message == "sidecar tok exited (code 3): tokenizer: cannot load vocab.json", st.message
        assert not _alive(engine), "the engine outlived the sidecar it depends on"

        (rec / "die").unlink()  # the next one stays; the engine's restart policy (10 s first) restarts both
        clock.advance(9.5)
        assert (await _state(s)).state == "exited", "restarted before the policy's delay"
        clock.advance(0.5)
        await await_until(lambda: _state_is(s, "ready"), DEADLINE_S, lambda: f"ready again: {s.states()}")
        assert (rec / "sidecar.pid").read_text() != first and s.states()[0].restarts == 1
        assert _ns(rec / "engine.started") > _ns(rec / "sidecar.ready"), "restarted before its sidecar was ready"


async def test_past_the_restart_limit_a_sidecar_that_exits_fails_the_shard_and_stops_the_rest(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    async with supervising(tmp_path, rec, restart=RestartPolicy(limit=0)) as s:
        await s.converge([shard(free_port(), rec, "exit")])
        (rec / "go").touch()
        (rec / "die").touch()  # it serves a moment, then exits
        st = await await_until(lambda: _state_is(s, "failed"), DEADLINE_S, lambda: f"the shard failed: {s.states()}")
        assert st.reason == Reason.SidecarFailed
        assert st.message.startswith("gave up after 0 restarts; sidecar tok exited (code 3): tokenizer: cannot")
        if (rec / "engine.pid").exists():
            assert not _alive(int((rec / "engine.pid").read_text()))


async def test_a_sidecar_never_ready_fails_the_shard_at_its_timeout_and_no_engine_starts(tmp_path: Path) -> None:
    rec, clock = tmp_path / "rec", FakeClock()
    async with supervising(tmp_path, rec, clock=clock) as s:
        await s.converge([shard(free_port(), rec, "never", check="tcp", timeout=30.0)])
        (rec / "go").touch()
        st = await _held_for_the_sidecar(s, rec)
        assert "(at most 30s): tcp on port" in st.message and "ConnectionRefusedError" in st.message, st.message
        clock.advance(29.0)
        assert (await _state(s)).state == "starting", "failed before its timeout"
        clock.advance(1.0)
        st = await _state(s)
        assert (st.state, st.reason) == ("failed", Reason.SidecarFailed)
        assert st.message.startswith("sidecar tok not ready within 30s (tcp on port"), st.message
        assert not (rec / "engine.started").exists()
        assert not _alive(int((rec / "sidecar.pid").read_text())), "the sidecar was left running"


async def _state_is(s: Supervisor, state: str) -> ShardState | None:
    st = await _state(s)
    return st if st.state == state else None


async def test_a_sidecars_secret_is_a_file_only_the_agents_user_reads_and_is_removed_after_it(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    told = rec / "key-file-told"
    code = ("import os, sys, time; open(sys.argv[1] + '.tmp', 'w').write(os.environ['LLMGW_SIDECAR_KEY_FILE']); "
            "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(600)")
    car = SidecarSpec(name="keyed", argv=[sys.executable, "-c", code, str(told)], secret=True)
    spec = ShardSpec(replica_id="r1", model="m", engine="sim", source="org/m", rank=0, world_size=1,
                     serve_port=free_port(), sidecars=[car], api_key="s3cret")
    async with supervising(tmp_path, rec) as s:
        await s.converge([spec])
        await await_until(lambda: _state_is(s, "ready"), DEADLINE_S, lambda: f"the shard ready: {s.states()}")
        await await_until(told.exists, DEADLINE_S, "the sidecar told its key file")
        key = Path(told.read_text())
        assert key.read_text() == "s3cret" and (key.stat().st_mode & 0o777) == 0o600
        assert "s3cret" not in " ".join(car.argv)
        await s.converge([])
        assert not key.exists(), "the secret outlived the sidecar"


async def test_an_engine_that_gives_up_past_its_restart_limit_stops_its_sidecars(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "sidecar.py").write_text(SIDECAR)
    (rec / "go").touch()

    def exits(s: ShardSpec, ports: Loopback) -> tuple[Launch | None, str]:
        return Launch(argv=[sys.executable, "-c", "import sys; print('engine: out of memory'); sys.exit(1)"],
                      serves_http=True), ""

    s = Supervisor(FakeClock(), tmp_path / "state", "127.0.0.1", exits, restart=RestartPolicy(limit=0))
    try:
        await s.converge([shard(free_port(), rec, "serve")])
        st = await await_until(lambda: _state_is(s, "failed"), DEADLINE_S, lambda: f"the shard failed: {s.states()}")
        assert st.reason == Reason.EngineExited, st
        assert (rec / "sidecar.stopped").exists(), "a failed shard's sidecar was left running"
        assert list((tmp_path / "state").glob("*.run")) == [], "its run file outlived it"
    finally:
        await s.close()
        pid = int((rec / "sidecar.pid").read_text() or 0) if (rec / "sidecar.pid").exists() else 0
        if pid and _alive(pid):
            os.kill(pid, 9)


# A sidecar that takes connections and never answers one: its HTTP readiness probe waits out PROBE_S.
SILENT = textwrap.dedent("""
    import os, socket, sys
    s = socket.socket()
    s.bind(("127.0.0.1", int(os.environ["LLMGW_SIDECAR_PORT"])))
    s.listen(64)
    open(sys.argv[1], "w").write(str(os.getpid()))
    held = []
    while True:
        held.append(s.accept()[0])
""")


async def test_sidecars_that_never_answer_hold_a_tick_one_probe_long_not_one_per_shard(tmp_path: Path) -> None:
    (tmp_path / "silent.py").write_text(SILENT)
    shards = 5

    def spec(i: int) -> ShardSpec:
        car = SidecarSpec(name="tok", argv=[sys.executable, str(tmp_path / "silent.py"), str(tmp_path / f"up{i}")],
                          port=True, ready="http", ready_path="/ready", ready_timeout=600.0)
        return ShardSpec(replica_id=f"r{i}", model="m", engine="sim", source="org/m", rank=0, world_size=1,
                         serve_port=free_port(), sidecars=[car])

    def never(s: ShardSpec, ports: Loopback) -> tuple[Launch | None, str]:
        return Launch(argv=[sys.executable, "-c", "raise SystemExit('the engine started')"], serves_http=True), ""

    s = Supervisor(FakeClock(), tmp_path / "state", "127.0.0.1", never)
    try:
        await s.converge([spec(i) for i in range(shards)])
        await await_until(lambda: all((tmp_path / f"up{i}").exists() for i in range(shards)), DEADLINE_S,
                          "every sidecar listening")
        began = time.monotonic()
        await s.tick()
        took = time.monotonic() - began
        assert all(st.reason == Reason.SidecarsStarting for st in s.states()), s.states()
        # probed one after another, the tick (and the heartbeat behind it) waits PROBE_S per shard
        assert took < 3 * sidecars.PROBE_S, f"one tick took {took:.1f}s for {shards} silent sidecars"
    finally:
        await s.close()


async def test_a_sidecar_that_cannot_be_started_fails_its_shard_and_not_the_agents_pass(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    bad = SidecarSpec(name="bad", argv=[sys.executable, "-c", "pass", "a\x00b"])  # exec refuses a NUL
    broken = ShardSpec(replica_id="r0", model="m", engine="sim", source="org/m", rank=0, world_size=1,
                       serve_port=free_port(), sidecars=[bad])
    async with supervising(tmp_path, rec) as s:
        (rec / "go").touch()
        await s.converge([broken, shard(free_port(), rec, "serve")])  # a tick: it must not raise
        st = s.states()[0]
        assert (st.state, st.reason) == ("failed", Reason.SidecarFailed), st
        assert st.message.startswith("cannot start sidecar bad"), st.message


        async def the_other_ready() -> bool:
            await s.tick()
            return s.states()[1].state == "ready"
        await await_until(the_other_ready, DEADLINE_S, lambda: f"the other shard ready: {s.states()}")


# A sidecar whose main process spawns a child in its group (a server) that shrugs off SIGTERM, then exits (mode
# "exit") or stays until stopped (mode "stay").
FORKS = textwrap.dedent("""
    import os, subprocess, sys, time
    child = os.path.join(sys.argv[1], "child.pid")
    code = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)")
    subprocess.Popen([sys.executable, "-c", code, child])
    while not os.path.exists(child) or not open(child).read():
        time.sleep(0.02)
    if sys.argv[2] == "stay":
        time.sleep(600)
    sys.exit(3)
""")


def _forks(rec: Path, mode: str) -> ShardSpec:
    (rec / "forks.py").write_text(FORKS)
    car = SidecarSpec(name="forks", argv=[sys.executable, str(rec / "forks.py"), str(rec), mode])
    return ShardSpec(replica_id="r1", model="m", engine="sim", source="org/m", rank=0, world_size=1,
                     serve_port=free_port(), sidecars=[car])


async def _child_stopped(rec: Path) -> None:
    child = int((rec / "child.pid").read_text())
    try:
        await await_until(lambda: not _alive(child), DEADLINE_S, "what the sidecar left behind stopped")
    finally:
        if _alive(child):
            os.kill(child, 9)


async def test_what_an_exited_sidecar_left_in_its_group_is_stopped_with_it(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    async with supervising(tmp_path, rec, restart=RestartPolicy(limit=0)) as s:
        await s.converge([_forks(rec, "exit")])
        st = await await_until(lambda: _state_is(s, "failed"), DEADLINE_S, lambda: f"the shard failed: {s.states()}")
        assert st.reason == Reason.SidecarFailed, st
        await _child_stopped(rec)


async def test_a_sidecars_stop_reaches_what_outlives_its_main_process(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    async with supervising(tmp_path, rec) as s:
        await s.converge([_forks(rec, "stay")])
        await await_until(lambda: (rec / "child.pid").exists() and (rec / "child.pid").read_text(), DEADLINE_S,
                          "the sidecar's child started")
        await s.converge([])
        await _child_stopped(rec)
