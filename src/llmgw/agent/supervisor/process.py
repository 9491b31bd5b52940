"""One shard's process and what is known about it."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from llmgw.agent.engines.base import LOOPBACK, Launch, Loopback
from llmgw.agent.gated import GATE_KEY_ENV, TlsFiles, gated_argv, host_port
from llmgw.agent.supervisor.adopt import SPEC_SUFFIX, AdoptedProcess, identity
from llmgw.agent.supervisor.files import log_tail as log_tail  # where other modules have found them
from llmgw.agent.supervisor.files import write_private as write_private
from llmgw.agent.supervisor.liveness import EngineLiveness
from llmgw.agent.supervisor.sidecars import Sidecars
from llmgw.agent.supervisor.sleeping import ShardSleep
from llmgw.wire.messages import EngineLoad, ShardSpec, ShardState, WeightsPlan


def state_name(replica_id: str, rank: int) -> str:
    """A shard's file name stem: a replica id is the control plane's word ("org/model-…"), not a safe file name,
    and every state file of a shard must land in the one directory the reaper reads."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", replica_id)[:80].lstrip(".")
    return f"{readable}-{hashlib.sha256(replica_id.encode()).hexdigest()[:8]}-rank{rank}"


@dataclass
class ShardProcess:
    spec: ShardSpec
    launch: Launch | None  # None: the shard cannot be launched here; `message` says why
    log_path: Path
    host: str
    proc: asyncio.subprocess.Process | AdoptedProcess | None = None
    state: str = "pending"
    message: str = ""
    reason: str = ""  # a code for message, when it says why the shard is not ready
    lost_peer: int | None = None  # exited: the rank of its group whose going ended it, as its engine said
    restarts: int = 0
    exit_code: int | None = None
    next_start: float = 0.0
    health_failures: int = 0  # health probes in a row that got no good answer
    answered_at: float | None = None  # the clock's time of its last good health answer; None: never (yet)
    load: EngineLoad | None = None  # the engine's gauges at the last probe that found it ready
    load_failure_logged: bool = False  # a scrape failed and was logged: later ones are not (they come every probe)
    stopping: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    liveness: EngineLiveness = field(default_factory=EngineLiveness)  # whether it answers a completion (liveness.py)
    ports: Loopback = field(default_factory=Loopback)  # its loopback ports behind the gate (none: not gated)
    tls: TlsFiles | None = None  # the node's certificate, for tunnels between ranks
    sidecars: Sidecars | None = None  # started before the engine, stopped after it (sidecars.py)
    sleep: ShardSleep = field(default_factory=ShardSleep)  # the level its engine sleeps at, and the call under way

    @property
    def key(self) -> tuple[str, int]:
        return (self.spec.replica_id, self.spec.rank)

    @property
    def pid_path(self) -> Path:
        return self.log_path.with_suffix(".pid")

    @property
    def endpoint(self) -> str:
        """Where the router and the agent's probes reach it: the node's address and the replica's port (its gate,
        when gated: the probes go the router's way, secret and all)."""
        if self.launch is not None and self.launch.serves_http and self.spec.serve_port:
            return f"http://{self.host}:{self.spec.serve_port}"
        return ""

    @property
    def gated(self) -> bool:
        """Its HTTP server binds the loopback port given it: the gate in front of it (started with it, in the same
        process group) is its only door from the network."""
        return (self.launch is not None and self.launch.serves_http and bool(self.spec.serve_port)
                and self.ports.engine != 0 and self.launch.http_port == self.ports.engine)

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The argv and extra environment that start it: behind its gate when gated (agent/gated.py)."""
        launch = self.launch
        assert launch is not None
        listen = upstream = tunnel_in = ""
        if self.gated:
            assert self.spec.serve_port is not None
            listen, upstream = host_port(self.host, self.spec.serve_port), f"http://{LOOPBACK}:{self.ports.engine}"
        if launch.tunnel_in is not None:
            tunnel_in = f"{host_port(self.host, launch.tunnel_in[0])}={launch.tunnel_in[1]}"
        outs = [f"{local}={host_port(addr, port)}" for local, addr, port in launch.tunnels_out]
        if not (listen or tunnel_in or outs):
            return launch.argv, launch.env
        argv = gated_argv(sys.executable, launch.argv, listen=listen, upstream=upstream, tunnel_in=tunnel_in,
                          tunnels_out=outs, tls=self.tls)
        return argv, {**launch.env, GATE_KEY_ENV: self.spec.api_key}

    async def start(self) -> None:
        assert self.launch is not None
        if self.liveness.task is not None:  # a new process: nothing the last one was found to be holds for it
            self.liveness.task.cancel()
        self.liveness = EngineLiveness()
        self.sleep.cancel()
        self.sleep = ShardSleep()  # a new process is awake
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            for path, content in self.launch.files.items():
                write_private(Path(path), content)
            # an engine's log can hold what it was started with: readable by the agent's user alone
            log = os.fdopen(os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        except OSError as e:
            self.state, self.exit_code = "exited", 126
            self.message = f"cannot write {e.filename or 'a file'}: {e.strerror}"
            return
        argv, env = self.command()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                env={**os.environ, **env},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group, so a stop reaches its children too
            )
        except OSError as e:
            self.proc = None
            self.state = "exited"
            self.exit_code = 127
            self.message = f"cannot start {self.launch.argv[0]}: {e.strerror}"
            return
        finally:
            log.close()
        # the pid and who it is (boot and start time): after a reboot or a pid's reuse it names someone else
        # and the loopback port it binds behind its gate (none: an engine a next agent must not adopt as gated)
        self.pid_path.write_text(f"{self.proc.pid} {identity(self.proc.pid)} {self.ports.engine}\n")
        # its spec beside it, so a next agent can adopt it rather than restart it (0600: it holds the engine's
        # secret), without the hub token: the engine never reads it, and a rotated token must not outlive its use
        write_private(self.pid_path.with_suffix(SPEC_SUFFIX), without_hub_token(self.spec).model_dump_json())
        self.state = "starting" if self.launch.serves_http else "running"
        self.message = self.reason = ""
        self.exit_code = self.lost_peer = self.answered_at = None
        self.health_failures = 0

    async def stop(self, grace: float = 10.0) -> None:
        await self.stop_engine(grace)
        if self.sidecars is not None:  # after the engine: it depends on them
            await self.sidecars.stop()

    async def stop_engine(self, grace: float = 10.0) -> None:
        self.stopping = True
        self.sleep.cancel()
        if self.liveness.task is not None:
            self.liveness.task.cancel()
        p = self.proc
        if p is None or p.returncode is not None:
            return
        _signal_group(p.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(p.wait(), grace)
        except TimeoutError:
            _signal_group(p.pid, signal.SIGKILL)
            await p.wait()
        self.pid_path.unlink(missing_ok=True)
        self.pid_path.with_suffix(SPEC_SUFFIX).unlink(missing_ok=True)
        if self.launch is not None:
            for path in self.launch.files:
                Path(path).unlink(missing_ok=True)

    def report(self) -> ShardState:
        return ShardState(
            replica_id=self.spec.replica_id,
            rank=self.spec.rank,
            state=self.state,  # type: ignore[arg-type]
            message=self.message[:2000],  # bounded as the wire bounds it: a URL or a log line can be long
            reason=self.reason,
            pid=self.proc.pid if self.proc and self.proc.returncode is None else None,
            endpoint=self.endpoint,
            exit_code=self.exit_code,
            restarts=self.restarts,
            load=self.load if self.state == "ready" else None,  # an engine not serving has no load to speak of
            closes_after_stream=self.launch.closes_after_stream if self.launch is not None else False,
            slots=self.launch.slots if self.launch is not None else None,
            lost_peer=self.lost_peer if self.state in ("exited", "failed") else None,
            adapters=[a.name for a in self.spec.adapters] if self.launch is not None else [],
        )


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def without_hub_token(spec: ShardSpec) -> ShardSpec:
    """The spec with the hub token of its weights plans (its own and its adapters') blanked."""
    def plain(w: WeightsPlan | None) -> WeightsPlan | None:
        return w if w is None or not w.token else w.model_copy(update={"token": ""})

    adapters = [a.model_copy(update={"weights": plain(a.weights)}) for a in spec.adapters]
    return spec.model_copy(update={"weights": plain(spec.weights), "adapters": adapters})


def launched(spec: ShardSpec) -> ShardSpec:
    """The spec as its engine reads it: the peers a plan names, the node it waits for and the hub token change as
    the fabric does (another node comes to hold the weights) and are no reason to restart an engine."""
    def plain(w: WeightsPlan | None) -> WeightsPlan | None:
        return None if w is None else w.model_copy(update={"peers": [], "origin": True, "wait_for": "", "token": ""})

    adapters = [a.model_copy(update={"weights": plain(a.weights)}) for a in spec.adapters]  # LoRA files likewise
    return spec.model_copy(update={"weights": plain(spec.weights), "adapters": adapters,
                                   "sleep": 0})  # asleep or awake, the same engine
