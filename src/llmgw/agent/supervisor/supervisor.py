"""Converge running shard processes on the desired list. Level-triggered: converge() is safe to repeat."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import aiohttp

from llmgw.agent.engines.base import Launch, Loopback
from llmgw.agent.engines.gauges import read_load
from llmgw.agent.gate import loopback_ports
from llmgw.agent.gated import TlsFiles
from llmgw.agent.supervisor import liveness, sidecar_wait, sidecars, sleeping
from llmgw.agent.supervisor.adopt import AdoptedProcess, Running, discard, leads_its_session
from llmgw.agent.supervisor.bodies import read_capped, utc
from llmgw.agent.supervisor.bodies import words as body_words
from llmgw.agent.supervisor.gpu_proof import GpuProof
from llmgw.agent.supervisor.process import ShardProcess, launched, log_tail, state_name
from llmgw.core.backoff import doubling
from llmgw.core.clock import Clock
from llmgw.core.reasons import Reason
from llmgw.wire.messages import EngineLoad, Problem, ShardSpec, ShardState

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class RestartPolicy:
    """An engine that exits is started again after `base` seconds, doubling to `cap`; after `limit` restarts its
    shard fails (exit code and last log lines in its message) and the control plane places the replica again."""

    base: float = 10.0
    cap: float = 300.0
    limit: int = 5

    def delay(self, restarts: int) -> float:
        return doubling(self.base, self.cap, restarts)

HEALTH_FAILURES_BEFORE_UNREADY = 3
REFUSAL_LINES = 40  # of its log's last 4 kB, where an engine's refusal of how it was started is looked for
SERVED = ("ready", "unresponsive")  # states of an engine that has served since it started
NO_MODEL = "no model loaded"
MODELS_BODY_MAX = 256 * 1024
METRICS_BODY_MAX = 1024 * 1024  # vLLM's page, histograms and all, is a few hundred kB



@dataclass(frozen=True)
class Pending:
    """Not startable yet, and on its way to being (its weights are arriving): asked again at every tick."""

    message: str
    reason: str


# the launch for a shard given the loopback ports picked for it (where it serves behind its gate, and through
# which it reaches its peers), or why there is none: words, or a Problem when the resolver knows the code
# (WeightsUnusable), or Pending when there will be one
Resolver = Callable[[ShardSpec, Loopback], tuple[Launch | None, "str | Problem | Pending"]]


class Supervisor:
    def __init__(self, clock: Clock, log_dir: Path, host: str, resolve: Resolver,
                 restart: RestartPolicy | None = None, answer_within: float = liveness.TIMEOUT_S,
                 tls: TlsFiles | None = None, prove: GpuProof | None = None) -> None:
        self.prove = prove  # after an engine's first ready: why it does not run on its GPUs ("" when it does)
        self.tls = tls  # the node's certificate: the tunnels between ranks (agent/tunnel.py) authenticate with it
        self.clock = clock
        self.answer_within = answer_within  # a one-token completion to an idle engine (liveness.py)
        self.restart = restart or RestartPolicy()
        self.log_dir = log_dir
        self.host = host
        self.resolve = resolve
        self.shards: dict[tuple[str, int], ShardProcess] = {}
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0))
        return self._session

    async def converge(self, desired: list[ShardSpec]) -> None:
        want = {(s.replica_id, s.rank): s for s in desired}
        for key, sp in list(self.shards.items()):
            # an engine launched is kept when only how its weights are had changed; one not launched (waiting,
            # or failed: a token refused, say) is prepared again from the new plan
            if key not in want or (want[key] != sp.spec and (sp.launch is None
                                                             or launched(want[key]) != launched(sp.spec))):
                await sp.stop()
                del self.shards[key]
            else:
                sp.spec = want[key]  # how its weights are had now: which files a running engine keeps in use
                sp.sleep.told = True  # the level to bring an adopted engine to is the control plane's
        for key, spec in want.items():
            if key not in self.shards:
                log = self.log_dir / f"{state_name(spec.replica_id, spec.rank)}.log"
                # the engine's, its peers' and its sidecars' ports in one call: the kernel repeats none of them
                peers = spec.world_size if spec.world_size > 1 else 0
                picked = loopback_ports(1 + peers + sidecars.ports_wanted(spec))
                sp = ShardProcess(spec=spec, launch=None, log_path=log, host=self.host, tls=self.tls,
                                  ports=Loopback(engine=picked[0], peers=tuple(picked[1:1 + peers])),
                                  sidecars=sidecars.Sidecars.of(spec, log, picked[1 + peers:]))
                self._prepare(sp)
                self.shards[key] = sp
        await self.tick()

    def _prepare(self, sp: ShardProcess) -> None:
        """Resolve a shard's launch: found, on its way (pending, with what it waits for), or failed with why."""
        try:
            launch, why = self.resolve(sp.spec, sp.ports)
        except Exception as e:  # one shard's trouble fails that shard, never the agent and its engines
            launch, why = None, f"cannot prepare the shard: {type(e).__name__}: {e}"
        sp.launch = launch if launch is None or sp.sidecars is None else sp.sidecars.into(launch)
        if launch is not None:
            if sp.reason == "WeightsFetching":
                sp.message, sp.reason = "", ""
        elif isinstance(why, Pending):
            sp.state, sp.message, sp.reason = "pending", why.message, why.reason
        elif isinstance(why, Problem):
            sp.state, sp.message, sp.reason = "failed", why.message, why.code
        else:
            sp.state, sp.message = "failed", why

    def adopt(self, found: dict[tuple[str, int], Running]) -> None:
        """Take over what a previous agent left running, as if this agent had started it: reported (its health
        probed) from the first heartbeat, kept if the control plane still wants exactly that shard, else stopped
        by the next converge like anything else not wanted."""
        for key, run in found.items():
            peers = loopback_ports(run.spec.world_size) if run.spec.world_size > 1 else []
            ports = Loopback(engine=run.engine_port, peers=tuple(peers))
            try:
                launch, _ = self.resolve(run.spec, ports)
            except Exception:
                launch = None
            # no loopback port recorded: started by an agent before gates, listening on the network itself; it is
            # restarted behind one rather than adopted
            log_path = self.log_dir / f"{state_name(run.spec.replica_id, run.spec.rank)}.log"
            whole, beside = sidecars.adopt(run.spec, log_path)  # not whole: the engine restarts after them
            if launch is None or not run.engine_port or not leads_its_session(run.pid) or not whole:
                discard(run)
                continue
            sp = ShardProcess(spec=run.spec, launch=beside.into(launch) if beside else launch, log_path=log_path,
                              host=self.host, tls=self.tls, ports=ports, sidecars=beside)
            sp.proc = AdoptedProcess(run.pid)
            sp.sleep.known = sp.sleep.told = launch.sleep is None  # asleep or not: read from an engine that sleeps
            sp.state, sp.message = "starting" if launch.serves_http else "running", "adopted from the previous agent"
            self.shards[key] = sp
            log.info("adopted %s rank %d (pid %d) from the previous agent", run.spec.replica_id, run.spec.rank,
                     run.pid)
        sidecars.reap(self.log_dir, {c.path(sidecars.RUN_SUFFIX) for sp in self.shards.values() if sp.sidecars
                                     for c in sp.sidecars.members})

    async def tick(self, starting_only: bool = False) -> None:
        """Start what is due, notice what exited, probe engines' health. `starting_only`: probe only engines not yet
        serving (between heartbeats, to see the moment one serves)."""
        now = self.clock.monotonic()
        probes = []
        for sp in self.shards.values():
            if sp.launch is None and sp.state == "pending":
                self._prepare(sp)
            if sp.launch is None or sp.state == "failed":
                continue
            p = sp.proc
            if sp.sidecars is not None and sp.state != "exited" and (gone := sp.sidecars.gone()):
                await sp.stop_engine()  # it depends on the sidecar: restarted after it, as if it had exited
                sp.exit_code, sp.lost_peer = None, None
                if self._exited(sp, now, gone, Reason.SidecarFailed):
                    await sp.sidecars.stop()
                    continue
            elif p is not None and p.returncode is not None and sp.state not in ("exited",):
                sp.exit_code = p.returncode
                words = log_tail(sp.log_path)
                how = "exited (exit code unknown: adopted)" if isinstance(p, AdoptedProcess) else (
                    f"exited with code {p.returncode}")
                sp.lost_peer = sp.launch.peer_lost(words, sp.spec.world_size)
                code, line = sp.launch.refused(log_tail(sp.log_path, REFUSAL_LINES, "\n")) if sp.launch.refusals \
                    else ("", "")
                if code:  # started the same way, it refuses again: no restart
                    sp.state, sp.reason, sp.message = "failed", code, f"{how}: {line}"
                    continue
                if self._exited(sp, now, how + (f": {words}" if words else ""), Reason.EngineExited):
                    if sp.sidecars is not None:  # given up: nothing will use them until the shard is placed again
                        await sp.sidecars.stop()
                    continue
            # ("starting" with no engine yet: waiting for its sidecars)
            if sp.state == "pending" or (sp.state == "exited" and now >= sp.next_start) or (
                    sp.state == "starting" and sp.proc is None):
                if holder := sleeping.held_by(sp, self.shards.values()):  # GPUs free once it sleeps
                    sp.message = f"waiting for the engine of {holder} to free its GPUs"
                    continue
                if sp.state == "exited":
                    sp.restarts += 1
                if sp.sidecars is not None:  # probed beside every other shard: a silent one costs a tick PROBE_S once
                    probes.append(self._start_after_sidecars(sp, now))
                    continue
                await sp.start()
            if sp.launch.sleep is not None and sp.proc is not None and sp.proc.returncode is None:
                # what a sleep freed: the driver's word where it can be read, not the engine's
                sleeping.steer(sp, self._http(), partial(self.prove.held, sp.spec, sp.proc.pid) if self.prove else None)
                if sp.sleep.busy and sp.liveness.task is not None:
                    sp.liveness.task.cancel()  # what a sleeper refuses is no verdict on it
            if sp.sleep.busy or sp.state == "failed":  # asleep, its health says nothing of serving
                continue
            if (sp.state == "starting" or (sp.state in SERVED and not starting_only)) and sp.launch.serves_http:
                probes.append(self._probe(sp))
        if probes:
            await asyncio.gather(*probes)
        if not starting_only:  # a ready engine's gauges were read just now: whether it is idle is known
            for sp in self.shards.values():
                self._liveness(sp, now)

    async def _start_after_sidecars(self, sp: ShardProcess, now: float) -> None:
        """Start the engine once every sidecar is ready, and probe it at once, as tick does an engine it starts."""
        assert sp.launch is not None
        if await sidecar_wait.ready(sp, now, self._http()):
            await sp.start()
            if sp.state == "starting" and sp.launch.serves_http:
                await self._probe(sp)

    def _exited(self, sp: ShardProcess, now: float, words: str, reason: Reason) -> bool:
        """The shard's engine exited (or was stopped for a sidecar that did): restarted after a delay, or, past the
        policy's limit, failed (True)."""
        sp.state, sp.message, sp.reason = "exited", words, reason.value
        if sp.restarts >= self.restart.limit:
            sp.state, sp.message = "failed", f"gave up after {sp.restarts} restarts; {words}"
            return True
        sp.next_start = now + self.restart.delay(sp.restarts)
        return False

    def _liveness(self, sp: ShardProcess, now: float) -> None:
        """Take a finished completion probe's verdict, and start the next one when it is due (liveness.py). Runs
        beside the loop: a hung engine holds its probe, never the heartbeat."""
        lv = sp.liveness
        if sp.launch is None or not sp.launch.completion_path or not sp.launch.serves_http or sp.proc is None:
            return
        if lv.task is not None and lv.task.done():
            try:
                words = lv.task.result()
            except asyncio.CancelledError:
                words = lv.wedged
            except Exception as e:  # the probe's own failure says nothing of the engine
                log.warning("%s rank %d: completion probe failed: %s", sp.spec.replica_id, sp.spec.rank, e)
                words = lv.wedged
            lv.task = None
            if words and not lv.wedged:
                log.warning("%s rank %d: not ready: %s", sp.spec.replica_id, sp.spec.rank, words)
            elif lv.wedged and not words:
                log.info("%s rank %d: answers completions again", sp.spec.replica_id, sp.spec.rank)
            lv.wedged = words
            lv.due_at = now + (liveness.WEDGED_EVERY_S if words else liveness.IDLE_EVERY_S)
            if words and sp.state == "ready":
                sp.state, sp.message, sp.reason = "unresponsive", words, "EngineUnresponsive"
            elif not words and sp.reason == "EngineUnresponsive" and sp.health_failures == 0:  # its health answers too
                sp.state, sp.message, sp.reason = "ready", "", ""
        if lv.task is not None or not (sp.state == "ready" or lv.wedged):
            return
        if lv.due_at is None:
            lv.due_at = now + liveness.IDLE_EVERY_S  # from its first ready: it just proved it loads
        elif now >= lv.due_at and (lv.wedged or liveness.idle(sp.load)):
            headers = {"Authorization": f"Bearer {sp.spec.api_key}"} if sp.spec.api_key else {}
            lv.task = asyncio.create_task(liveness.one_token(
                self._http(), sp.endpoint + sp.launch.completion_path, sp.spec.model, headers, self.answer_within))

    async def _probe(self, sp: ShardProcess) -> None:
        assert sp.launch is not None
        url = sp.endpoint + sp.launch.health_path
        headers = {"Authorization": f"Bearer {sp.spec.api_key}"} if sp.spec.api_key else {}
        try:
            async with self._http().get(url, headers=headers) as resp:
                healthy = resp.status == 200
                detail = f"health answered {resp.status}"
        except (aiohttp.ClientError, TimeoutError) as e:
            healthy = False
            detail = f"health probe: {type(e).__name__}"
        if sp.proc is None or sp.proc.returncode is not None:
            return
        code = ""
        if healthy and sp.launch.models_path:
            healthy, code, detail = await self._serves_a_model(sp, headers)
        if healthy and sp.state not in SERVED and self.prove and (why := await self.prove(sp.spec, sp.proc.pid)):
            await sp.stop_engine()
            sp.state, sp.reason, sp.message = "failed", Reason.GPUUnused.value, why
            return
        if healthy:
            sp.health_failures, sp.answered_at = 0, self.clock.now()
            if sp.liveness.wedged:  # its health answers; completions do not (liveness.py)
                sp.state, sp.message, sp.reason = "unresponsive", sp.liveness.wedged, "EngineUnresponsive"
            else:
                sp.state, sp.message, sp.reason = "ready", "", ""
            sp.load = await self._scrape(sp, headers)
            return
        sp.load = None
        if sp.state in SERVED:  # it served: no answer now is a hang or a fault, never a load ("starting")
            sp.health_failures += 1
            if sp.health_failures >= HEALTH_FAILURES_BEFORE_UNREADY:
                sp.state, sp.reason = "unresponsive", "EngineUnresponsive"
                sp.message = (f"not answering since {utc(sp.answered_at)}: {sp.health_failures} health probes "
                              f"missed in a row (the last: {detail})")
        else:
            sp.message = f"waiting for health: {detail}"
            sp.reason = code

    async def _serves_a_model(self, sp: ShardProcess, headers: dict[str, str]) -> tuple[bool, str, str]:
        """(ready, reason code, words). An engine whose health answers can still have failed to load its model
        (some keep their HTTP server up and list nothing): ready means it lists a model."""
        assert sp.launch is not None
        path = sp.launch.models_path
        try:
            async with self._http().get(sp.endpoint + path, headers=headers) as resp:
                body = await read_capped(resp.content, MODELS_BODY_MAX)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as e:
            return False, "", f"models probe: {type(e).__name__}"
        if status in (401, 403, 404):  # not the model's trouble: the secret or the path
            return False, "", f"{path} answered {status}: {body_words(body)}"
        if status != 200:
            return False, "ModelNotLoaded", f"{NO_MODEL}: {path} answered {status}: {body_words(body)}"
        try:
            data = json.loads(body)
        except ValueError:
            return False, "ModelNotLoaded", f"{NO_MODEL}: {path} is not JSON"
        listed = data.get("data") if isinstance(data, dict) else None
        if not isinstance(listed, list) or not listed:
            error = data.get("error") if isinstance(data, dict) else None
            return False, "ModelNotLoaded", f"{NO_MODEL}: health answers 200 but {path} lists no model" + (
                f" ({str(error)[:300]})" if error else "")
        return True, "", ""

    async def _scrape(self, sp: ShardProcess, headers: dict[str, str]) -> EngineLoad | None:
        """The engine's gauges from its metrics page, or None. Load is something to route by, never a verdict on
        health: whatever the page says or fails to say, readiness is the health and completion probes' alone."""
        assert sp.launch is not None
        if not sp.launch.metrics_path:
            return None
        load, words = await self._read_metrics(sp, headers)
        if load is None and not sp.load_failure_logged:  # once: a failing scrape fails at every probe
            log.warning("%s rank %d: no engine load: %s", sp.spec.replica_id, sp.spec.rank, words)
            sp.load_failure_logged = True
        return load

    async def _read_metrics(self, sp: ShardProcess, headers: dict[str, str]) -> tuple[EngineLoad | None, str]:
        """(the load, or None and why)."""
        assert sp.launch is not None
        path = sp.launch.metrics_path
        # the classic text format: to a client that accepts OpenMetrics, prometheus_client answers in that syntax
        asked = {**headers, "Accept": "text/plain;version=0.0.4"}
        try:
            async with self._http().get(sp.endpoint + path, headers=asked) as resp:
                body = await read_capped(resp.content, METRICS_BODY_MAX)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as e:
            return None, f"{path}: {type(e).__name__}"
        if status != 200:
            return None, f"{path} answered {status}: {body_words(body)}"
        if len(body) >= METRICS_BODY_MAX:  # cut off mid-line: its last line is not what the engine wrote
            body = body[: body.rfind(b"\n") + 1]
        text, now = body.decode(errors="replace"), self.clock.now()
        try:  # in a thread: a page is up to a megabyte of the engine's text, and the loop has heartbeats to send
            load = await asyncio.to_thread(read_load, text, sp.launch.gauges, now)
        except Exception as e:  # read_load refuses bad text with None; anything else is a bug, never a stopped agent
            log.exception("%s rank %d: reading the engine's metrics failed", sp.spec.replica_id, sp.spec.rank)
            return None, f"{path}: {type(e).__name__}: {e}"
        return load, "" if load is not None else f"{path} holds none of the engine's gauges, or not as Prometheus text"

    def settling(self) -> bool:
        """An engine is up and not yet serving: its readiness is worth noticing (and reporting) at once."""
        # ("running": a worker's steady state; a hung engine is probed at its own pace, not every moment)
        # (a sleep or a wake under way: its end is a change of state to report at once)
        return any((sp.state == "starting" and not sp.liveness.wedged) or sp.sleep.task is not None
                   for sp in self.shards.values())

    def states(self) -> list[ShardState]:
        return [sp.report() for _, sp in sorted(self.shards.items())]

    async def close(self, keep_engines: bool = False) -> None:
        """Stop every engine, or with `keep_engines` (a hand-over to the next agent) leave them, and their pid and
        spec files, for it to adopt."""
        for sp in self.shards.values():
            if sp.liveness.task is not None:
                sp.liveness.task.cancel()
        if not keep_engines:
            await asyncio.gather(*(sp.stop(grace=5.0) for sp in self.shards.values()))
        self.shards.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

