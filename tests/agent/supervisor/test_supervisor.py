"""The supervisor with real processes: start, health, restart with backoff, give up with the process's words."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.agent.engines import Launch
from llmgw.agent.engines.base import Loopback
from llmgw.agent.supervisor import Supervisor
from llmgw.agent.supervisor import supervisor as sup
from llmgw.core.clock import FakeClock
from llmgw.wire.messages import ShardSpec
from tests.harness import await_until, free_port

NONE = Loopback()  # no loopback ports: the engine binds the replica's port itself


def spec(port: int, rid: str = "r1") -> ShardSpec:
    return ShardSpec(replica_id=rid, model="m", engine="sim", source="org/m", rank=0, world_size=1, serve_port=port)


def sim_launch(s: ShardSpec, ports: Loopback = NONE) -> tuple[Launch | None, str]:
    argv = [
        sys.executable,
        "-m",
        "llmgw.sim.engine",
        "--model",
        "m",
        "--host",
        "127.0.0.1",
        "--port",
        str(s.serve_port),
    ]
    return Launch(argv=argv, serves_http=True), ""


def crashing_launch(s: ShardSpec, ports: Loopback = NONE) -> tuple[Launch | None, str]:
    code = "import sys; print('error while loading shared libraries: libgomp.so.1'); sys.exit(127)"
    return Launch(argv=[sys.executable, "-c", code], serves_http=True), ""


async def state_of(s: Supervisor) -> str:
    await s.tick()
    return s.states()[0].state if s.states() else ""


async def test_start_probe_ready_then_stop(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim_launch)
    port = free_port()
    try:
        await s.converge([spec(port)])
        await await_until(lambda: _is(s, "ready"), 20, "shard ready")
        st = s.states()[0]
        assert st.endpoint == f"http://127.0.0.1:{port}" and st.pid
        pid = st.pid
        await s.converge([])  # no longer desired: stopped
        assert s.states() == []
        assert not _alive(pid)
    finally:
        await s.close()


async def test_restart_with_backoff_then_give_up_with_the_processes_words(tmp_path: Path) -> None:
    """10 s, doubling to 5 min, five restarts: a crash loop fails its replica (placed again elsewhere) with the
    exit code and the last log lines, rather than restarting for ever or at once."""
    clock = FakeClock()
    policy = sup.RestartPolicy()
    assert (policy.base, policy.cap, policy.limit) == (10.0, 300.0, 5)
    s = Supervisor(clock, tmp_path, "127.0.0.1", crashing_launch, policy)
    try:
        await s.converge([spec(free_port())])
        await await_until(lambda: _is(s, "exited"), 10, "first exit")
        st = s.states()[0]
        assert st.exit_code == 127 and "libgomp.so.1" in st.message
        for n, delay in enumerate([10.0, 20.0, 40.0, 80.0, 160.0]):
            clock.advance(delay - 0.5)
            await s.tick()
            assert s.states()[0].restarts == n, f"restarted before its {delay:.0f} s were up"
            clock.advance(0.5)
            await s.tick()
            assert s.states()[0].restarts == n + 1
            await await_until(lambda: _is(s, "exited", "failed"), 10, f"exit {n + 1}")
        await s.tick()
        final = s.states()[0]
        assert final.state == "failed"
        assert "gave up after 5 restarts" in final.message and "libgomp" in final.message
        assert "exited with code 127" in final.message
    finally:
        await s.close()


def test_the_backoff_stops_doubling_at_its_cap() -> None:
    assert [sup.RestartPolicy().delay(n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]


async def test_unresolvable_shard_fails_with_the_reason(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", lambda sp, _: (None, "weights not found on this node: /m/x"))
    await s.converge([spec(free_port())])
    st = s.states()[0]
    assert st.state == "failed" and st.message == "weights not found on this node: /m/x"
    await s.close()


async def _is(s: Supervisor, *states: str) -> bool:
    return await state_of(s) in states


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purposes; and it may be reaped between the two looks, or
    # between opening its stat file and reading it (ESRCH on the read: a clean-clone run hit that)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize("rid", ["r1", "org/model-1a2b"])  # a model named org/model once hid its pid file
async def test_engines_left_by_a_killed_agent_are_found_by_the_next(tmp_path: Path, rid: str) -> None:
    from llmgw.agent.supervisor.adopt import discard, find_running, identity, leads_its_session

    first = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim_launch)
    await first.converge([spec(free_port(), rid)])
    pid = first.shards[(rid, 0)].proc.pid  # type: ignore[union-attr]
    try:
        assert [p.read_text().split()[0] for p in tmp_path.glob("*.pid")] == [str(pid)]
        # the agent dies without stopping anything: its supervisor object is simply dropped
        first.shards.clear()
        written = [p.read_text() for p in tmp_path.glob("*.pid")]
        found = find_running(tmp_path)
        assert [(k, r.pid) for k, r in found.items()] == [((rid, 0), pid)], (
            written, identity(pid), leads_its_session(pid))
        discard(found[(rid, 0)])  # what the next agent does with a shard nobody wants any more
        await await_until(lambda: _async(not _alive(pid)), 10, "orphan gone")
        assert list(tmp_path.glob("*.pid")) == []
    finally:
        if _alive(pid):  # a failed assertion must not leave the engine it started behind
            os.killpg(pid, 9)
        await first.close()


async def _async(v: bool) -> bool:
    return v


async def test_one_shard_that_cannot_be_prepared_fails_alone(tmp_path: Path) -> None:
    """An exception preparing one shard (a pypkg:// source whose package is missing, a model name too long for a
    file name) fails that shard only; it must not end the agent and so stop every engine on the node."""
    from llmgw.agent.weights.resolve import resolve_source

    def resolve(s: ShardSpec, ports: Loopback = NONE) -> tuple[Launch | None, str]:
        if s.replica_id == "bad":
            path, why = resolve_source("pypkg://not_installed_pkg.sub/model.gguf")
            assert path is None and "not installed" in why
            raise OSError(36, "File name too long")
        return sim_launch(s)

    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", resolve)
    try:
        await s.converge([spec(free_port(), "bad"), spec(free_port(), "good")])
        await await_until(lambda: _is_rid(s, "good", "ready"), 20, "the good shard ready")
        bad = next(st for st in s.states() if st.replica_id == "bad")
        assert bad.state == "failed" and "File name too long" in bad.message
    finally:
        await s.close()


async def _is_rid(s: Supervisor, rid: str, state: str) -> bool:
    await s.tick()
    return any(st.replica_id == rid and st.state == state for st in s.states())


async def test_a_pid_file_naming_another_process_is_never_acted_on(tmp_path: Path) -> None:
    """After a reboot or a pid's reuse, a pid file may name an unrelated session leader."""
    from llmgw.agent.supervisor.adopt import find_running

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        (tmp_path / "x-rank0.pid").write_text(f"{other.pid} some-other-boot/123\n")
        (tmp_path / "x-rank0.shard").write_text(spec(free_port(), "x").model_dump_json())
        assert find_running(tmp_path) == {}
        assert other.poll() is None, "an unrelated process was killed"
        assert not (tmp_path / "x-rank0.pid").exists()
    finally:
        other.kill()
        other.wait()


async def test_the_hub_token_is_never_written_beside_a_shard(tmp_path: Path) -> None:
    """The spec kept beside a running shard (for a next agent to adopt it) held the weights plan's hub token, and
    kept the old one after a rotation (the new token is no reason to restart the engine, so the file was not
    written again). It is written without it: the engine never reads it."""
    from llmgw.wire.weights_plan import WeightsPlan

    def with_token(token: str) -> ShardSpec:
        return spec(port, "hub").model_copy(update={"weights": WeightsPlan(base_url="https://hub.internal",
                                                                           token=token)})

    port = free_port()
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim_launch)
    try:
        await s.converge([with_token("hf_first_secret")])
        pid = s.shards[("hub", 0)].proc.pid  # type: ignore[union-attr]
        (kept,) = tmp_path.glob("*.shard")
        assert "hf_first_secret" not in kept.read_text() and "hub.internal" in kept.read_text()
        await s.converge([with_token("hf_rotated_secret")])
        assert s.shards[("hub", 0)].proc.pid == pid  # type: ignore[union-attr]  # not restarted for it
        assert "secret" not in kept.read_text()
    finally:
        await s.converge([])
