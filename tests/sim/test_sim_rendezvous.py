"""The rendezvous protocol in-process: joining, refusals, and each side noticing the other go."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import pytest
import pytest_asyncio

from llmgw.sim.rendezvous import Leader, RendezvousError, Worker
from tests.harness import await_until

from .procs import DEADLINE, free_port

T = TypeVar("T")


async def _within(aw: Awaitable[T]) -> T:
    async with asyncio.timeout(DEADLINE):
        return await aw


@pytest_asyncio.fixture
async def leader() -> AsyncIterator[Leader]:
    lead = Leader("127.0.0.1", 0, world_size=3)
    await lead.start()
    yield lead
    await lead.close()


@pytest_asyncio.fixture
async def workers() -> AsyncIterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for w in made:
        await w.close()


def _worker(made: list[Worker], port: int, rank: int) -> Worker:
    w = Worker("127.0.0.1", port, rank, retry_interval=0.05)
    made.append(w)
    return w


@pytest.mark.asyncio
async def test_all_workers_join(leader: Leader, workers: list[Worker]) -> None:
    waiting = asyncio.ensure_future(leader.wait_all_joined())
    await _within(_worker(workers, leader.port, 2).join())
    assert leader.joined == [2]
    assert not waiting.done()
    await _within(_worker(workers, leader.port, 1).join())
    await _within(waiting)
    assert leader.joined == [1, 2]


@pytest.mark.asyncio
async def test_duplicate_and_out_of_range_ranks_are_refused(leader: Leader, workers: list[Worker]) -> None:
    await _within(_worker(workers, leader.port, 1).join())
    with pytest.raises(RendezvousError, match="rank 1 has already joined"):
        await _within(_worker(workers, leader.port, 1).join())
    with pytest.raises(RendezvousError, match=r"outside 1\.\.2"):
        await _within(_worker(workers, leader.port, 3).join())
    assert leader.joined == [1]


@pytest.mark.asyncio
async def test_a_garbled_hello_is_answered_with_an_error(leader: Leader) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", leader.port)
    writer.write(b"howdy 1\n")
    reply = await _within(reader.readline())
    writer.close()
    assert reply.startswith(b"error expected 'hello <rank>'")
    assert leader.joined == []


@pytest.mark.asyncio
async def test_a_worker_leaving_breaks_the_group(leader: Leader, workers: list[Worker]) -> None:
    first = _worker(workers, leader.port, 1)
    await _within(first.join())
    await first.close()
    # The group had not formed yet; waiting for it now fails instead of hanging.
    with pytest.raises(RendezvousError, match="worker rank 1 disconnected"):
        await _within(leader.wait_all_joined())
    assert await _within(leader.wait_broken()) == "worker rank 1 disconnected"


@pytest.mark.asyncio
@pytest.mark.parametrize("orderly", [True, False])
async def test_the_worker_tells_an_orderly_stop_from_a_drop(workers: list[Worker], orderly: bool) -> None:
    lead = Leader("127.0.0.1", 0, world_size=2)
    await lead.start()
    worker = _worker(workers, lead.port, 1)
    await _within(worker.join())
    await _within(lead.wait_all_joined())
    await lead.close(orderly=orderly)
    gone = await _within(worker.wait_lost())
    assert gone.orderly is orderly
    assert ("shut down" in gone.reason) is orderly


@pytest.mark.asyncio
async def test_a_worker_retries_until_the_leader_listens(workers: list[Worker]) -> None:
    port = free_port()
    logged: list[str] = []
    worker = Worker("127.0.0.1", port, 1, retry_interval=0.05, log=logged.append)
    workers.append(worker)
    joining = asyncio.ensure_future(worker.join())
    await await_until(lambda: logged, DEADLINE, "the worker tried and was refused at least once", interval=0.01)
    assert not joining.done()
    lead = Leader("127.0.0.1", port, world_size=2)
    await lead.start()
    try:
        await _within(joining)
        await _within(lead.wait_all_joined())
        assert lead.joined == [1]
    finally:
        await lead.close()


def test_constructors_check_their_arguments() -> None:
    with pytest.raises(ValueError):
        Leader("127.0.0.1", 0, world_size=1)
    with pytest.raises(ValueError):
        Worker("127.0.0.1", 1, rank=0)
