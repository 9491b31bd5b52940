"""A shard told to sleep (ShardSpec.sleep) is put to sleep by its engine, and woken when told 0.

After a sleep the agent checks that the GPU memory was really freed (engines leak), where the engine says what it
holds (SleepControl.memory_field); else it wakes the engine and tries level 2, and when that frees nothing either the
shard fails with reason SleepFailed and the numbers: the control plane then stops it. A wake from level 2 runs the
engine's whole level-2 wake (SleepControl.deep_wake: vLLM's level 2 discards the weights, which a bare wake leaves
gone). Each call runs as a task beside the loop, so a slow wake never holds a heartbeat. An engine adopted from a
previous agent is asked whether it sleeps before its health is believed, and brought to a level only once the
control plane has said which.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from llmgw.agent.engines.base import Launch, SleepControl, WakeStep
from llmgw.core.reasons import Reason
from llmgw.wire.messages import ShardSpec

log = logging.getLogger(__name__)

FREED_SHARE = 0.1  # a sleep freed the GPU when at most this share of what the engine held awake is still held
CALL_TIMEOUT_S = 120.0  # a wake at level 2 reloads the weights: as long as a load may reasonably take
MiB = 1 << 20
MEMORY_MAX = 1 << 50  # a PiB: more than one engine's GPUs hold


@dataclass
class ShardSleep:
    """What the agent knows of one shard's sleep: the level its engine sleeps at (0 awake) and the call under way."""

    level: int = 0
    task: asyncio.Task[tuple[int, str]] | None = None
    waking: bool = False  # the task under way wakes it (else it puts it to sleep)
    # adopted from a previous agent: whether it sleeps is read from the engine (known), and nothing is changed
    # before the control plane has said the level (told): the spec on file is from the engine's start
    known: bool = True
    learning: bool = False  # the task under way reads whether it sleeps
    told: bool = True
    # found asleep by this agent: at which level is not said (vLLM's /is_sleeping does not), so it is woken as from
    # level 2, whose wake serves a level-1 sleeper too (its weights, still held, are read again)
    depth_unknown: bool = False

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None

    @property
    def busy(self) -> bool:
        """Asleep or on its way in or out: its health says nothing about serving, and nothing probes it."""
        return self.level > 0 or self.task is not None or not self.known


# the GPU memory a shard's processes hold on its GPUs as the driver accounts it (None: it cannot be read there)
Measure = Callable[[], Awaitable[int | None]]


class Engine:
    """One engine's sleep routes, reached through its gate with its key."""

    def __init__(self, http: aiohttp.ClientSession, endpoint: str, key: str, ctl: SleepControl,
                 measure: Measure | None = None) -> None:
        self.http, self.endpoint, self.ctl, self.measure = http, endpoint, ctl, measure
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def _call(self, method: str, path: str, body: str = "") -> tuple[int, bytes]:
        timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
        headers = self.headers | ({"Content-Type": "application/json"} if body else {})
        async with self.http.request(method, self.endpoint + path, headers=headers, data=body.encode() or None,
                                     timeout=timeout) as r:
            return r.status, (await r.content.read(4096))

    async def held(self) -> tuple[bool, int | None]:
        """(whether it says it sleeps, the GPU memory it says it holds, or None where it says none)."""
        status, body = await self._call("GET", self.ctl.state_path)
        if status != 200:
            raise SleepError(f"{self.ctl.state_path} answered {status}: {_words(body)}")
        try:
            data = json.loads(body)
        except ValueError:
            raise SleepError(f"{self.ctl.state_path} is not JSON: {_words(body)}") from None
        if not isinstance(data, dict) or not isinstance(data.get("is_sleeping"), bool):
            raise SleepError(f"{self.ctl.state_path} does not say whether it sleeps: {_words(body)}")
        if not self.ctl.memory_field:  # its word is not taken: the driver's accounting, where it can be read
            return data["is_sleeping"], await self.measure() if self.measure is not None else None
        # an engine that says what it holds must say it plainly: a figure missing, negative, not a whole number or
        # past any GPU is no proof that memory was freed (and one past a float would break the check itself)
        mem = data.get(self.ctl.memory_field)
        if type(mem) is not int or not 0 <= mem <= MEMORY_MAX:
            raise SleepError(f"{self.ctl.state_path} gives no GPU memory figure in {self.ctl.memory_field}: "
                             f"{_words(body)}")
        return data["is_sleeping"], mem

    async def post(self, path: str) -> None:
        await self.step(WakeStep(path), path.split("?")[0])

    async def step(self, step: WakeStep, name: str = "") -> None:
        """One call, which must answer 200 and, where the step names a field, say it succeeded."""
        status, body = await self._call("POST", step.path, step.body)
        name = name or step.path
        if status != 200:
            raise SleepError(f"{name} answered {status}: {_words(body)}")
        if not step.field:
            return
        try:
            data = json.loads(body)
        except ValueError:
            raise SleepError(f"{name} is not JSON: {_words(body)}") from None
        if not isinstance(data, dict) or data.get(step.field) != step.value:
            raise SleepError(f"{name} did not give {step.field} {json.dumps(step.value)}: {_words(body)}")

    async def wake(self, level: int) -> None:
        """Wakes it from `level`: from level 2, by the engine's whole wake where its weights were discarded."""
        steps = self.ctl.deep_wake if level >= 2 else ()
        if not steps:
            await self.post(self.ctl.wake_path)
        for step in steps:  # in order, each checked: a step that fails fails the wake with the engine's words
            await self.step(step)


class SleepError(Exception):
    """The engine refused or failed a sleep call: its words."""


async def put_to_sleep(e: Engine, level: int) -> tuple[int, str]:
    """(the level it sleeps at with its GPU memory freed, words); level 0: it could not, and why."""
    _, awake = await e.held()
    tried = []
    for lvl in sorted({level, 2}):
        await e.post(e.ctl.sleep_path.format(level=lvl))
        asleep, held = await e.held()
        if not asleep:
            return 0, f"asked to sleep at level {lvl}, it says it is awake"
        if held is None or awake is None or held <= awake * FREED_SHARE:
            freed = "" if held is None else f": {held // MiB} MiB of {(awake or 0) // MiB} MiB still held"
            return lvl, f"asleep at level {lvl}{freed}"
        tried.append(f"level {lvl} left {held // MiB} MiB of {awake // MiB} MiB held")
        await e.wake(lvl)  # deeper from awake: an engine need not go from one level to another
    return 0, "GPU memory not freed after sleep: " + "; ".join(tried)


async def learn(e: Engine) -> tuple[int, str]:
    asleep, _ = await e.held()
    return (1, "found asleep by this agent") if asleep else (0, "adopted from the previous agent")


async def wake(e: Engine, level: int) -> tuple[int, str]:
    await e.wake(level)
    asleep, _ = await e.held()
    return (1, "asked to wake, it says it still sleeps") if asleep else (0, "")


def outcome(s: ShardSleep) -> tuple[str, str, str] | None:
    """A finished call's result as the shard's (state, reason, message); None while none finished."""
    if s.task is None or not s.task.done():
        return None
    task, waking, learning = s.task, s.waking, s.learning
    s.task, s.learning = None, False
    try:
        level, words = task.result()
    except asyncio.CancelledError:
        return None
    except (SleepError, aiohttp.ClientError, TimeoutError, OSError) as ex:
        level, words = (s.level, f"{type(ex).__name__}: {ex}") if not isinstance(ex, SleepError) else (s.level, str(ex))
        what = "read whether it sleeps" if learning else "wake" if waking else "sleep"
        return "failed", Reason.SleepFailed, f"could not {what}: {words}"
    if learning:  # asleep: it stays out of the routing table; awake: its health is probed as any adopted engine's
        s.known, s.level, s.depth_unknown = True, level, level > 0
        return ("sleeping", Reason.Sleeping, words) if level else ("starting", "", words)
    if waking:
        if level:
            return "failed", Reason.SleepFailed, f"could not wake: {words}"
        s.level, s.depth_unknown = 0, False
        return "starting", "", "woken: waiting for health"
    if not level:
        return "failed", Reason.SleepFailed, words
    s.level, s.depth_unknown = level, False
    return "sleeping", Reason.Sleeping, words


def _words(body: bytes) -> str:
    return body[:300].decode(errors="replace").strip()


class Process(Protocol):
    @property
    def returncode(self) -> int | None: ...


class Shard(Protocol):
    """What steer() reads and sets of a shard (agent/supervisor/process.py's ShardProcess)."""

    spec: ShardSpec
    launch: Launch | None
    sleep: ShardSleep
    state: str
    reason: str
    message: str

    @property
    def proc(self) -> Process | None: ...

    @property
    def endpoint(self) -> str: ...


def held_by(sp: Shard, shards: Iterable[Shard]) -> str:
    """Another engine on the node still holding a GPU the shard is to use ("" none): one told to sleep that has not
    yet freed it, or failed to. The control plane counts a sleeper's GPUs free at once; the node starts the engine
    that takes them only once they are."""
    mine = set(sp.spec.gpus)
    for o in shards:
        running = o.proc is not None and o.proc.returncode is None
        if o is not sp and running and mine & set(o.spec.gpus) and (not o.sleep.level or o.sleep.task is not None):
            return o.spec.replica_id
    return ""


def steer(sp: Shard, http: aiohttp.ClientSession, measure: Measure | None = None) -> None:
    """Take a finished call's result, and start the call that brings the engine to the level its spec says."""
    assert sp.launch is not None and sp.launch.sleep is not None
    s, done = sp.sleep, outcome(sp.sleep)
    if done is not None:
        sp.state, sp.reason, sp.message = done
        if sp.state == "failed":
            log.warning("%s rank %d: %s", sp.spec.replica_id, sp.spec.rank, sp.message)
    if s.task is not None or sp.state == "failed" or not sp.endpoint:
        return
    e = Engine(http, sp.endpoint, sp.spec.api_key, sp.launch.sleep, measure)
    if not s.known:
        s.task, s.learning = asyncio.create_task(learn(e)), True
    elif not s.told:
        return
    elif sp.spec.sleep and not s.level and sp.state == "ready":
        s.task, s.waking = asyncio.create_task(put_to_sleep(e, sp.spec.sleep)), False
        # out of the routing table at once: what it is asked while it goes to sleep would be refused
        sp.state, sp.reason, sp.message = "sleeping", Reason.Sleeping, f"going to sleep at level {sp.spec.sleep}"
    elif sp.spec.sleep and not s.level and sp.state == "unresponsive":  # it cannot be asked: its GPUs stay held,
        # and an engine placed on them waits (held_by) until the control plane stops this one
        sp.state, sp.reason, sp.message = "failed", Reason.SleepFailed, "could not sleep: its engine does not answer"
    elif not sp.spec.sleep and s.level:
        s.task, s.waking = asyncio.create_task(wake(e, 2 if s.depth_unknown else s.level)), True
        sp.state, sp.reason, sp.message = "sleeping", Reason.Sleeping, f"waking from level {s.level}"
