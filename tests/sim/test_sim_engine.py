"""The sim engine as real processes on 127.0.0.1: group formation, HTTP only on the leader, broken groups exit."""

from __future__ import annotations

import asyncio
import json
import re
import signal

import aiohttp
import pytest

from tests.harness import await_until

from .conftest import StartEngine
from .procs import DEADLINE, EngineProc, free_port, listening_ports, tcp_sockets


async def _health(port: int) -> bool:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            async with session.get(f"http://127.0.0.1:{port}/health") as resp:
                return resp.status == 200
    except aiohttp.ClientError:
        return False


async def _refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


def _leader_args(model: str, http: int, rendezvous: int, world_size: int, *extra: str) -> list[str]:
    return [
        "--model", model, "--rank", "0", "--world-size", str(world_size), "--host", "127.0.0.1",
        "--port", str(http), "--rendezvous-port", str(rendezvous), *extra,
    ]  # fmt: skip


def _worker_args(model: str, rank: int, rendezvous: int, world_size: int) -> list[str]:
    return [
        "--model", model, "--rank", str(rank), "--world-size", str(world_size), "--host", "127.0.0.1",
        "--rendezvous-port", str(rendezvous), "--leader-address", "127.0.0.1",
    ]  # fmt: skip


def _port(line: str) -> int:
    found = re.search(r"127\.0\.0\.1:(\d+)", line)
    assert found, line
    return int(found.group(1))


async def _pair(start_engine: StartEngine, *extra: str) -> tuple[EngineProc, EngineProc, int, int]:
    """A world-size-2 group that has formed and serves HTTP: (leader, worker, http port, rendezvous port).

    Both ports are chosen by the kernel (port 0) and read back from the leader's stderr, so parallel test runs
    cannot race for them.
    """
    leader = await start_engine(*_leader_args("sim-2", 0, 0, 2, *extra))
    rdv = _port(await leader.wait_line("waiting for 1 worker"))
    worker = await start_engine(*_worker_args("sim-2", 1, rdv, 2))
    http = _port(await leader.wait_line("serving sim-2 on http://"))
    await await_until(lambda: _health(http), DEADLINE, "the sim engine healthy")
    return leader, worker, http, rdv


@pytest.mark.asyncio
async def test_leader_serves_only_after_the_worker_joins(start_engine: StartEngine) -> None:
    http, rdv = free_port(), free_port()
    leader = await start_engine(*_leader_args("sim-2", http, rdv, 2))
    await leader.wait_line("waiting for 1 worker")

    assert await _refused(http)
    assert listening_ports(leader.pid) == {rdv}

    worker = await start_engine(*_worker_args("sim-2", 1, rdv, 2))
    await await_until(lambda: _health(http), DEADLINE, "the sim engine healthy")
    assert listening_ports(leader.pid) == {rdv, http}
    await worker.wait_line("joined")

    async with aiohttp.ClientSession() as session:
        body = {"model": "sim-2", "messages": [{"role": "user", "content": "say four words please"}]}
        async with session.post(f"http://127.0.0.1:{http}/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            answer = await resp.json()
    assert answer["object"] == "chat.completion"
    assert answer["usage"]["prompt_tokens"] == 4
    text = answer["choices"][0]["message"]["content"]
    assert len(text.split()) == answer["usage"]["completion_tokens"] > 0


@pytest.mark.asyncio
async def test_worker_listens_on_nothing(start_engine: StartEngine) -> None:
    leader, worker, http, rdv = await _pair(start_engine)

    assert listening_ports(worker.pid) == set()
    # The same /proc reading does see the worker's socket: its connection to the leader's rendezvous port.
    assert ("01", rdv) in {(state, remote) for state, _, remote in tcp_sockets(worker.pid)}
    assert listening_ports(leader.pid) == {rdv, http}


@pytest.mark.asyncio
async def test_streaming_chunks_arrive_as_separate_events(start_engine: StartEngine) -> None:
    _, _, http, _ = await _pair(start_engine, "--tokens-per-second", "10", "--tokens", "5")
    loop = asyncio.get_running_loop()
    events: list[tuple[float, str]] = []
    body = {
        "model": "sim-2",
        "messages": [{"role": "user", "content": "stream it"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE)) as session:
        async with session.post(f"http://127.0.0.1:{http}/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            buffer = ""
            async for data in resp.content.iter_any():
                buffer += data.decode()
                while "\n\n" in buffer:
                    event, buffer = buffer.split("\n\n", 1)
                    events.append((loop.time(), event))
    assert buffer == ""

    assert all(event.startswith("data: ") for _, event in events)
    assert events[-1][1] == "data: [DONE]"
    chunks = [json.loads(event.removeprefix("data: ")) for _, event in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    tokens = [(t, c["choices"][0]["delta"]["content"]) for (t, _), c in zip(events, chunks, strict=False)
              if c["choices"] and c["choices"][0]["delta"].get("content")]  # fmt: skip
    assert len(tokens) == 5
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    # At 10 tokens/s the five tokens are written over 0.4 s; received in one lump they would share a moment.
    assert tokens[-1][0] - tokens[0][0] >= 0.2


@pytest.mark.asyncio
async def test_killing_the_worker_makes_the_leader_exit_non_zero(start_engine: StartEngine) -> None:
    leader, worker, _, _ = await _pair(start_engine)
    worker.proc.kill()
    assert await leader.exit_code() != 0
    assert "worker rank 1 disconnected" in leader.stderr


@pytest.mark.asyncio
async def test_killing_the_leader_makes_the_worker_exit_non_zero(start_engine: StartEngine) -> None:
    leader, worker, _, _ = await _pair(start_engine)
    leader.proc.kill()
    assert await worker.exit_code() != 0
    assert "lost the leader" in worker.stderr


@pytest.mark.asyncio
async def test_a_worker_started_first_waits_for_the_leader(start_engine: StartEngine) -> None:
    http, rdv = free_port(), free_port()
    worker = await start_engine(*_worker_args("sim-2", 1, rdv, 2))
    await worker.wait_line("not reachable yet")
    leader = await start_engine(*_leader_args("sim-2", http, rdv, 2))
    await worker.wait_line("joined")
    await leader.wait_line("serving sim-2")
    await await_until(lambda: _health(http), DEADLINE, "the sim engine healthy")
    assert worker.proc.returncode is None


@pytest.mark.asyncio
async def test_world_size_one_serves_at_once_without_a_rendezvous_port(start_engine: StartEngine) -> None:
    leader = await start_engine(*_leader_args("solo", 0, free_port(), 1))
    http = _port(await leader.wait_line("serving solo on http://"))
    await await_until(lambda: _health(http), DEADLINE, "the sim engine healthy")
    assert listening_ports(leader.pid) == {http}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{http}/v1/models") as resp:
            assert [m["id"] for m in (await resp.json())["data"]] == ["solo"]


@pytest.mark.asyncio
async def test_sigterm_on_the_leader_mid_stream_stops_the_group_cleanly(start_engine: StartEngine) -> None:
    leader, worker, http, _ = await _pair(start_engine, "--tokens-per-second", "2", "--tokens", "100")
    body = {"model": "sim-2", "prompt": "slow", "stream": True}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE)) as session:
        async with session.post(f"http://127.0.0.1:{http}/v1/completions", json=body) as resp:
            assert resp.status == 200
            first = await resp.content.readuntil(b"\n\n")  # a 50 s stream is now under way
            assert first.startswith(b"data: ")
            leader.proc.send_signal(signal.SIGTERM)
            assert await leader.exit_code(timeout=5.0) == 0
    # An orderly stop is announced, so the worker does not report a broken group.
    assert await worker.exit_code(timeout=5.0) == 0
    assert "shut down" in worker.stderr


@pytest.mark.asyncio
async def test_sigterm_on_a_worker_exits_zero_and_breaks_the_group(start_engine: StartEngine) -> None:
    leader, worker, _, _ = await _pair(start_engine)
    worker.proc.send_signal(signal.SIGTERM)
    assert await worker.exit_code(timeout=5.0) == 0
    assert await leader.exit_code() == 1
    assert "collective broken: worker rank 1 disconnected" in leader.stderr


@pytest.mark.asyncio
async def test_sigterm_while_waiting_for_workers_exits_zero(start_engine: StartEngine) -> None:
    leader = await start_engine(*_leader_args("sim-3", 0, 0, 3))
    await leader.wait_line("waiting for 2 worker")
    leader.proc.send_signal(signal.SIGTERM)
    assert await leader.exit_code(timeout=5.0) == 0


@pytest.mark.asyncio
async def test_a_taken_http_port_is_reported_and_exits_non_zero(start_engine: StartEngine) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    taken = server.sockets[0].getsockname()[1]
    try:
        leader = await start_engine(*_leader_args("solo", taken, 0, 1))
        assert await leader.exit_code() == 1
        assert f"cannot bind HTTP port 127.0.0.1:{taken}" in leader.stderr
    finally:
        server.close()


@pytest.mark.asyncio
async def test_bad_usage_exits_two(start_engine: StartEngine) -> None:
    worker = await start_engine("--model", "m", "--rank", "1", "--world-size", "2")
    assert await worker.exit_code() == 2
    assert "--leader-address" in worker.stderr
