"""How a sim engine's ranks form a group, standing in for torch.distributed / NCCL setup.

Each worker holds one TCP connection to the leader's rendezvous port: it sends `hello <rank>\\n`, the leader answers
`ok\\n` (or `error <why>\\n` and closes), then the connection stays silent. Either end seeing it close means the
collective broke, unless the leader first sent `shutdown\\n` (an orderly stop): then its workers end cleanly too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from llmgw.core.errors import LlmgwError

HELLO_TIMEOUT = 10.0  # seconds a connection may take to say hello before the leader drops it
RETRY_INTERVAL = 0.2  # seconds between a worker's connection attempts while the leader is not there yet


class RendezvousError(LlmgwError):
    """The group could not form, or broke after forming."""


@dataclass(frozen=True)
class LeaderGone:
    """Why a worker's connection to its leader ended."""

    reason: str
    orderly: bool  # the leader announced a shutdown; otherwise the group broke


def _ignore(message: str) -> None:
    pass


class Leader:
    """Rank 0's side: accept hellos from ranks 1..world_size-1 and watch their connections."""

    def __init__(self, host: str, port: int, world_size: int, *, log: Callable[[str], None] = _ignore) -> None:
        if world_size < 2:
            raise ValueError("a rendezvous needs at least one worker (world_size >= 2)")
        self.host = host
        self.requested_port = port
        self.world_size = world_size
        self.log = log
        self._server: asyncio.Server | None = None
        self._joined: dict[int, asyncio.StreamWriter] = {}
        self._all_joined = asyncio.Event()
        self._broken = asyncio.Event()
        self._broken_reason = ""
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Bind the rendezvous port (OSError if it cannot)."""
        self._server = await asyncio.start_server(self._on_connect, self.host, self.requested_port)

    @property
    def port(self) -> int:
        """The bound port (useful when started with port 0)."""
        if self._server is None:
            raise RuntimeError("Leader.start() has not run")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def joined(self) -> list[int]:
        return sorted(self._joined)

    async def wait_all_joined(self) -> None:
        """Return once every worker has said hello; raise RendezvousError if one drops out first."""
        await _first(self._all_joined, self._broken)
        if self._broken.is_set():
            raise RendezvousError(self._broken_reason)

    async def wait_broken(self) -> str:
        """Wait until a joined worker's connection closes; return why."""
        await self._broken.wait()
        return self._broken_reason

    async def close(self, *, orderly: bool = False) -> None:
        """Stop listening and drop the workers; `orderly` first tells them it is a shutdown, not a failure."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for writer in self._joined.values():
            if orderly:
                with contextlib.suppress(ConnectionError):
                    writer.write(b"shutdown\n")
                    await writer.drain()
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            async with asyncio.timeout(HELLO_TIMEOUT):
                line = await reader.readline()
        except (TimeoutError, ConnectionError, ValueError):
            line = b""
        rank, problem = self._admit(line)
        if problem:
            if line:
                self.log(f"refused rendezvous from {peer}: {problem}")
            with contextlib.suppress(ConnectionError):
                writer.write(f"error {problem}\n".encode())
                await writer.drain()
            writer.close()
            return
        self._joined[rank] = writer
        writer.write(b"ok\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        self.log(f"worker rank {rank} joined from {peer} ({len(self._joined)}/{self.world_size - 1})")
        if len(self._joined) == self.world_size - 1:
            self._all_joined.set()
        # Workers say nothing more; reading only tells us when the connection ends.
        with contextlib.suppress(ConnectionError):
            while await reader.read(4096):
                pass
        if not self._closing and not self._broken.is_set():
            self._broken_reason = f"worker rank {rank} disconnected"
            self._broken.set()
        writer.close()

    def _admit(self, line: bytes) -> tuple[int, str]:
        parts = line.decode(errors="replace").split()
        if len(parts) != 2 or parts[0] != "hello" or not parts[1].isdigit():
            return -1, f"expected 'hello <rank>', got {line[:80]!r}"
        rank = int(parts[1])
        if not 1 <= rank < self.world_size:
            return rank, f"rank {rank} is outside 1..{self.world_size - 1}"
        if rank in self._joined:
            return rank, f"rank {rank} has already joined"
        if self._broken.is_set():
            return rank, "the group is already broken"
        return rank, ""


class Worker:
    """A rank > 0: join the leader (retrying until it listens), then hold the connection."""

    def __init__(
        self,
        leader_host: str,
        port: int,
        rank: int,
        *,
        retry_interval: float = RETRY_INTERVAL,
        log: Callable[[str], None] = _ignore,
    ) -> None:
        if rank < 1:
            raise ValueError("workers have rank >= 1")
        self.leader_host = leader_host
        self.port = port
        self.rank = rank
        self.retry_interval = retry_interval
        self.log = log
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def join(self) -> None:
        """Connect and say hello, retrying while nothing listens; RendezvousError if the leader refuses us."""
        attempts = 0
        while True:
            try:
                reader, writer = await asyncio.open_connection(self.leader_host, self.port)
                break
            except OSError as e:
                attempts += 1
                if attempts == 1:
                    self.log(f"leader {self.leader_host}:{self.port} not reachable yet ({e}); retrying")
                await asyncio.sleep(self.retry_interval)
        try:
            writer.write(f"hello {self.rank}\n".encode())
            await writer.drain()
            reply = (await reader.readline()).decode(errors="replace").strip()
        except ConnectionError as e:
            writer.close()
            raise RendezvousError(f"leader {self.leader_host}:{self.port} dropped the connection: {e}") from e
        if reply != "ok":
            writer.close()
            why = reply.removeprefix("error ").strip() or "it closed the connection"
            raise RendezvousError(f"leader {self.leader_host}:{self.port} refused rank {self.rank}: {why}")
        self._reader, self._writer = reader, writer

    async def wait_lost(self) -> LeaderGone:
        """Wait until the leader's connection ends; say why."""
        if self._reader is None:
            raise RuntimeError("Worker.join() has not succeeded")
        leader = f"{self.leader_host}:{self.port}"
        try:
            while line := await self._reader.readline():
                if line.strip() == b"shutdown":
                    return LeaderGone(f"leader {leader} shut down", orderly=True)
        except (ConnectionError, ValueError) as e:
            return LeaderGone(f"connection to leader {leader} failed: {e}", orderly=False)
        return LeaderGone(f"leader {leader} closed the connection", orderly=False)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError):
                await self._writer.wait_closed()


async def _first(*events: asyncio.Event) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
