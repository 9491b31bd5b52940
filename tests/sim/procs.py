"""Sim test helpers: free ports, sim engine subprocesses with their stderr, and /proc socket inspection."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

import pytest

import llmgw
from tests.harness import free_port

SRC = Path(llmgw.__file__).resolve().parents[1]
__all__ = ["DEADLINE", "EngineProc", "free_port", "listening_ports", "tcp_sockets"]

DEADLINE = 15.0  # seconds any single wait in these tests may take before it fails


class EngineProc:
    """A running `python -m llmgw.sim.engine` with its stderr collected line by line."""

    def __init__(self, proc: asyncio.subprocess.Process, reader: asyncio.StreamReader) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._stderr = reader
        self._changed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def spawn(cls, *args: str) -> EngineProc:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "llmgw.sim.engine",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        assert proc.stderr is not None
        engine = cls(proc, proc.stderr)
        engine._reader = asyncio.create_task(engine._read())
        return engine

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    async def _read(self) -> None:
        while line := await self._stderr.readline():
            self.lines.append(line.decode(errors="replace"))
            self._changed.set()
        self._changed.set()

    async def wait_line(self, text: str, timeout: float = DEADLINE) -> str:
        """The first stderr line containing `text`; fails the test at the deadline."""
        assert self._reader is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for line in self.lines:
                if text in line:
                    return line
            if self._reader.done():
                pytest.fail(f"engine {self.pid} closed stderr without a line containing {text!r}:\n{self.stderr}")
            self._changed.clear()
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await self._changed.wait()
            except TimeoutError:
                pytest.fail(f"no stderr line containing {text!r} within {timeout}s:\n{self.stderr}")

    async def exit_code(self, timeout: float = DEADLINE) -> int:
        """Wait for the process to end (failing the test at the deadline); its exit code."""
        assert self._reader is not None
        try:
            async with asyncio.timeout(timeout):
                code = await self.proc.wait()
                await self._reader
        except TimeoutError:
            pytest.fail(f"engine {self.pid} still running after {timeout}s:\n{self.stderr}")
        return code

    async def stop(self) -> None:
        """Kill the process if it still runs (test teardown)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


def tcp_sockets(pid: int) -> list[tuple[str, int, int]]:
    """(state, local port, remote port) of each TCP socket the process holds open, read from /proc.

    /proc/<pid>/net/tcp lists every socket in the network namespace; the process's own are those whose inode
    appears among its file descriptors. States are kernel hex codes: "0A" LISTEN, "01" ESTABLISHED.
    """
    inodes: set[str] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found: list[tuple[str, int, int]] = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for row in path.read_text().splitlines()[1:]:
            fields = row.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if inode in inodes:
                found.append((state, int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)))
    return found


def listening_ports(pid: int) -> set[int]:
    return {local for state, local, _ in tcp_sockets(pid) if state == "0A"}
