"""A shard's sidecars: processes its engine depends on, started before it and stopped after it (docs/serving.md).

Each sidecar is started in its own session, its output in a log of its own beside the engine's; the engine starts
only once every sidecar is ready (its HTTP path answered 2xx, or its port took a connection), and a sidecar not
ready within its check's timeout fails the shard. A sidecar that exits takes the engine down with it: the shard
exits with the sidecar's words (SidecarFailed) and is restarted, sidecars first, as the engine's restart policy
says. Each running sidecar leaves a run file ("pid identity port"), so that a next agent adopting the engine
adopts its sidecars with it (the engine was told their ports), or stops them when it does not adopt the engine.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp

from llmgw.agent.engines.base import LOOPBACK, Launch
from llmgw.agent.gate import loopback_ports
from llmgw.agent.supervisor.adopt import AdoptedProcess, Running, identity, leads_its_session, stop_group
from llmgw.agent.supervisor.files import log_tail, write_private
from llmgw.wire.messages import ShardSpec
from llmgw.wire.serving import SIDECAR_KEY_FILE_ENV, SIDECAR_PORT_ENV, SidecarSpec, port_env

LOG_MAX_BYTES = 16 * 1024 * 1024  # at a start, a longer log is kept as .log.1 (one generation), like a rotation
TAIL_LINES = 5
PROBE_S = 2.0
STOP_GRACE_S = 10.0
RUN_SUFFIX = ".run"  # not ".pid": adopt.find_running takes every *.pid for an engine's


@dataclass
class Sidecar:
    spec: SidecarSpec
    stem: Path  # the shard's state files' stem and the sidecar's name: <stem>.log, <stem>.run, <stem>.key
    port: int = 0
    proc: asyncio.subprocess.Process | AdoptedProcess | None = None
    started_at: float = 0.0  # the clock's monotonic time of its start
    ready: bool = False
    words: str = ""  # why it is not ready, as the last probe found
    who: str = ""  # its process's identity (adopt.identity) at its start: its pid may later name another

    def path(self, suffix: str) -> Path:
        return self.stem.with_name(self.stem.name + suffix)

    def exited(self) -> bool:
        return self.proc is not None and self.proc.returncode is not None

    def last_words(self) -> str:
        return log_tail(self.path(".log"), TAIL_LINES)


@dataclass(frozen=True)
class SidecarWaiting:
    words: str


@dataclass(frozen=True)
class SidecarFailed:
    words: str


Step = SidecarWaiting | SidecarFailed | None  # None: every sidecar is ready


def ports_wanted(spec: ShardSpec) -> int:
    """How many loopback ports the shard's sidecars listen on."""
    return sum(1 for s in spec.sidecars if s.port)


class Sidecars:
    """The sidecars of one shard, with the loopback ports picked for them (kept across restarts: the engine is told
    them once, in its environment and its arguments)."""

    def __init__(self, members: list[Sidecar], secret: str) -> None:
        self.members = members
        self._secret = secret

    @classmethod
    def of(cls, spec: ShardSpec, log_path: Path, picked: list[int] | None = None) -> Sidecars | None:
        """The shard's sidecars, with the ports `picked` for them (ports_wanted(spec) of them, chosen in one call
        with the engine's so that none repeats one of those) or picked here (None: it has none)."""
        if not spec.sidecars:
            return None
        ports = iter(picked if picked is not None else loopback_ports(ports_wanted(spec)))
        return cls([Sidecar(s, _stem(log_path, s.name), next(ports) if s.port else 0) for s in spec.sidecars],
                   spec.api_key)

    def into(self, launch: Launch) -> Launch:
        """The engine's launch told where its sidecars listen: LLMGW_SIDECAR_<NAME>_PORT, and {sidecars.NAME.port}
        in its arguments replaced."""
        ports = {c.spec.name: c.port for c in self.members if c.spec.port}
        argv = list(launch.argv)
        for name, port in ports.items():
            argv = [a.replace(f"{{sidecars.{name}.port}}", str(port)) for a in argv]
        return replace(launch, argv=argv, env={**launch.env, **{port_env(n): str(p) for n, p in ports.items()}})

    def gone(self) -> str:
        """Words for the first sidecar that exited ("": none did)."""
        c = next((c for c in self.members if c.exited()), None)
        if c is None or c.proc is None:
            return ""
        code = c.proc.returncode
        how = "exit code unknown: adopted" if isinstance(c.proc, AdoptedProcess) else f"code {code}"
        words = c.last_words()
        return f"sidecar {c.spec.name} exited ({how})" + (f": {words}" if words else "")

    async def advance(self, now: float, http: aiohttp.ClientSession) -> Step:
        """Start what does not run, probe what is not ready: None when all are, else why the engine waits or why
        the shard fails."""
        for c in self.members:
            if c.proc is None or c.exited():
                _leftovers(c)  # a child of the last one would hold its port
                why = await self._start(c, now)
                if why:
                    return SidecarFailed(why)
        await asyncio.gather(*(_probe(c, http) for c in self.members if not c.ready))
        late = next((c for c in self.members if not c.ready), None)
        if late is None:
            return None
        waited, limit = now - late.started_at, late.spec.ready_timeout
        if waited >= limit:
            words = late.last_words()
            return SidecarFailed(f"sidecar {late.spec.name} not ready within {limit:g}s ({late.words})"
                          + (f"; its last lines: {words}" if words else ""))
        # no running count in the words: a report that changes at every heartbeat is written at every heartbeat
        return SidecarWaiting(f"waiting for sidecar {late.spec.name} to be ready (at most {limit:g}s): {late.words}")

    async def _start(self, c: Sidecar, now: float) -> str:
        """Start one sidecar; "" or why it could not be."""
        env = {**os.environ, **c.spec.env}
        argv = list(c.spec.argv)
        if c.spec.port:
            env[SIDECAR_PORT_ENV] = str(c.port)
            argv = [a.replace("{port}", str(c.port)) for a in argv]
        log_path = c.path(".log")
        try:
            if c.spec.secret:  # a file only the agent's user reads, never the command line (other users read those)
                write_private(c.path(".key"), self._secret)
                env[SIDECAR_KEY_FILE_ENV] = str(c.path(".key"))
            log_path.parent.mkdir(parents=True, exist_ok=True)
            if log_path.exists() and log_path.stat().st_size > LOG_MAX_BYTES:
                log_path.replace(c.path(".log.1"))
            log = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        except OSError as e:
            return f"sidecar {c.spec.name}: cannot write {e.filename or 'a file'}: {e.strerror}"
        try:
            c.proc = await asyncio.create_subprocess_exec(
                *argv, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True)  # its own process group: a stop reaches its children too
        except (OSError, ValueError) as e:  # ValueError: a NUL in its argv or env, which exec cannot pass
            c.proc = None
            return f"cannot start sidecar {c.spec.name} ({argv[0]!r}): {e.strerror if isinstance(e, OSError) else e}"
        finally:
            log.close()
        c.started_at, c.ready, c.words = now, not c.spec.ready, "not yet probed"
        c.who = identity(c.proc.pid)
        write_private(c.path(RUN_SUFFIX), f"{c.proc.pid} {c.who} {c.port}\n")  # whole or not at all
        return ""

    async def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Stop every sidecar (after the engine: it depends on them) and remove its run and key files."""
        await asyncio.gather(*(_stop(c, grace) for c in self.members))


def _stem(log_path: Path, name: str) -> Path:
    return log_path.with_name(f"{log_path.stem}.sidecar-{name}")


async def _probe(c: Sidecar, http: aiohttp.ClientSession) -> None:
    try:
        if c.spec.ready == "tcp":
            _, writer = await asyncio.wait_for(asyncio.open_connection(LOOPBACK, c.port), PROBE_S)
            writer.close()
            c.ready = True
            return
        url = f"http://{LOOPBACK}:{c.port}{c.spec.ready_path}"
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=PROBE_S)) as resp:
            c.ready = 200 <= resp.status < 300
            c.words = f"{c.spec.ready_path} answered {resp.status}"
    except (OSError, aiohttp.ClientError, TimeoutError) as e:
        c.words = f"{c.spec.ready or 'probe'} on port {c.port}: {type(e).__name__}"


async def _stop(c: Sidecar, grace: float) -> None:
    _leftovers(c)
    p = c.proc
    if p is not None and p.returncode is None:
        _signal_group(p.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(p.wait(), grace)
        except TimeoutError:
            _signal_group(p.pid, signal.SIGKILL)
            await p.wait()
    _leftovers(c)  # its children, when it went without them
    c.proc, c.ready = None, False  # its pid is no longer ours to signal
    c.path(RUN_SUFFIX).unlink(missing_ok=True)
    c.path(".key").unlink(missing_ok=True)


def _leftovers(c: Sidecar) -> None:
    """Kill what an exited sidecar left in its process group (a server it spawned), unless its pid now names another
    process: while any of the group lives, the kernel gives no new process that number."""
    p = c.proc
    if p is not None and p.returncode is not None and identity(p.pid) in ("", c.who):
        _signal_group(p.pid, signal.SIGKILL)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def adopt(spec: ShardSpec, log_path: Path) -> tuple[bool, Sidecars | None]:
    """The sidecars a previous agent left running beside an engine being adopted, as it recorded them (None: the
    shard has none); False when one of them is gone (the engine is then started again, after them)."""
    if not spec.sidecars:
        return True, None
    members = []
    for s in spec.sidecars:
        c = Sidecar(s, _stem(log_path, s.name))
        pid, port = _running(c.path(RUN_SUFFIX))
        if not pid:
            return False, None
        c.proc, c.port, c.ready = AdoptedProcess(pid), port, True
        c.who = c.proc.who
        members.append(c)
    return True, Sidecars(members, spec.api_key)


def _running(run: Path) -> tuple[int, int]:
    """(pid, port) of the very process a run file names, alive; (0, 0) when it is gone or names another."""
    try:
        number, who, port = run.read_text().split()
        pid = int(number)
        return (pid, int(port)) if who and identity(pid) == who and leads_its_session(pid) else (0, 0)
    except (OSError, ValueError):
        return 0, 0


def beside(found: Iterable[Running]) -> set[Path]:
    """The run files of the sidecars a previous agent left beside these engines."""
    return {run for r in found for run in r.pid_path.parent.glob(f"{r.pid_path.stem}.sidecar-*{RUN_SUFFIX}")}


def reap(state_dir: Path, kept: set[Path]) -> None:
    """Stop the sidecars a previous agent left beside engines this one did not adopt (all but `kept`)."""
    stop_recorded(set(state_dir.glob(f"*.sidecar-*{RUN_SUFFIX}")) - kept)


def stop_recorded(runs: Iterable[Path]) -> None:
    """Stop the sidecars these run files name, when they still are those processes, and forget them."""
    for run in runs:
        pid, _ = _running(run)
        if pid:
            stop_group(pid)
        run.unlink(missing_ok=True)
        run.with_suffix(".key").unlink(missing_ok=True)
