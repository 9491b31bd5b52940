"""Prove an engine runs by running it. A binary listed, present and executable can still fail to start (a missing
shared library): ldd names what is missing, the version command proves the rest, and the engine's own --help is
checked for every flag llmgw will pass it."""

from __future__ import annotations

import asyncio
import glob
import os
import re
import signal
import sys
from dataclasses import dataclass

from llmgw import __version__
from llmgw.agent.engines import ADAPTERS, builtin
from llmgw.agent.engines.base import Packaging
from llmgw.agent.installs.engine_check import check_flags
from llmgw.core.reasons import Reason
from llmgw.wire.messages import EngineStatus

_VERSION = re.compile(r"version:?\s*(\S+)")


@dataclass(frozen=True)
class RunResult:
    code: int
    output: str


async def run(argv: list[str], timeout: float = 20.0, env: dict[str, str] | None = None,
              stop: signal.Signals = signal.SIGKILL) -> RunResult:
    """Run to the end (or `timeout`), output and error together; never raises for the command's own failure.

    The command runs in a session of its own, and whatever it started goes with it when it runs out of time or its
    caller is cancelled (an install abandoned must not leave a pip writing into the next attempt's directory).
    `stop` is the first signal sent (apt-get gets SIGTERM: killed outright it can leave dpkg half way)."""
    try:
        p = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
            env={**os.environ, **env} if env else None, start_new_session=True,
        )
    except OSError as e:
        return RunResult(127, f"cannot execute {argv[0]}: {e.strerror}")
    try:
        out = await asyncio.wait_for(_read_bounded(p), timeout)
    except (TimeoutError, asyncio.CancelledError) as e:
        await _end(p, stop)
        if isinstance(e, asyncio.CancelledError):
            raise
        return RunResult(124, f"{argv[0]} did not answer within {timeout:.0f}s")
    return RunResult(p.returncode or 0, out.decode(errors="replace"))


OUTPUT_MAX = 4 << 20  # what is kept of a command's output: help texts are 200 kB; the rest is read and dropped


async def _read_bounded(p: asyncio.subprocess.Process) -> bytes:
    """The output up to OUTPUT_MAX, the rest drained (a command that prints without end must not fill memory),
    then the exit."""
    assert p.stdout is not None
    kept = bytearray()
    while chunk := await p.stdout.read(1 << 16):
        if len(kept) < OUTPUT_MAX:
            kept += chunk[: OUTPUT_MAX - len(kept)]
    await p.wait()
    return bytes(kept)


async def _end(p: asyncio.subprocess.Process, first: signal.Signals, grace: float = 30.0) -> None:
    """SIGKILL to the whole session; or `first` to the command alone, then, after `grace`, SIGKILL to the session
    (apt-get is asked to stop and stops dpkg itself: signalling dpkg too could leave it interrupted)."""
    if first != signal.SIGKILL:
        try:
            os.kill(p.pid, first)
            await asyncio.wait_for(asyncio.shield(p.wait()), grace)
        except (ProcessLookupError, TimeoutError):
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    try:
        await asyncio.wait_for(asyncio.shield(p.wait()), 10.0)
    except TimeoutError:
        pass


PLUGINS_MAX = 64  # backends read beside an executable: llama.cpp's CPU builds carry a dozen
# ldd's words for a library found without the symbol version a file needs (a build made on a newer C library)
_VERSION_MISSING = re.compile(r"^\s*\S+?: (\S+): version `([^']{1,80})' not found \(required by (\S+)\)")


def ldd_missing(output: str, of: str) -> list[tuple[str, str]]:
    """(what is missing, which file needs it) for each line of ldd's output that says something is not found."""
    out = []
    for ln in output.splitlines():
        m = _VERSION_MISSING.match(ln)
        if m:
            out.append((f"{os.path.basename(m.group(1))} version {m.group(2)}", os.path.basename(m.group(3))))
        elif "=>" in ln and ln.rstrip().endswith("not found"):
            out.append((ln.split("=>")[0].strip()[:200], of))
        elif "not found" in ln:  # in words this does not know: shown as they are
            out.append((ln.strip()[:300], of))
    return out


def plugins_of(binary: str, pattern: str) -> list[str]:
    """The files beside `binary` its packaging names as plugins, each once (links to one file are one)."""
    if not pattern:
        return []
    seen, out = {os.path.realpath(binary)}, []
    for p in sorted(glob.glob(os.path.join(glob.escape(os.path.dirname(binary)), pattern)))[:PLUGINS_MAX]:
        real = os.path.realpath(p)
        if real not in seen and os.path.isfile(real):
            seen.add(real)
            out.append(p)
    return out


async def missing_libraries(binary: str, plugins: str = "") -> list[str]:
    """What the dynamic loader cannot find for `binary` and its plugins, each with the files that need it:
    "libcudart.so.12 (needed by libggml-cuda.so)"."""
    needed: dict[str, list[str]] = {}
    files = [binary, *plugins_of(binary, plugins)]
    ran: list[RunResult] = []
    for i in range(0, len(files), 8):  # a few at once: a dozen backends, each ldd a loader run
        ran += await asyncio.gather(*(run(["ldd", f], timeout=10.0) for f in files[i : i + 8]))
    for f, r in zip(files, ran, strict=True):
        for lib, by in ldd_missing(r.output, os.path.basename(f)):
            if by not in needed.setdefault(lib, []):
                needed[lib].append(by)
    return [f"{lib} (needed by {', '.join(by[:4])}{', …' if len(by) > 4 else ''})" for lib, by in needed.items()]


def _last_line(output: str) -> str:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


async def probe(engine: str, binary: str) -> EngineStatus:
    """Whether `binary` (an engine's executable) runs here, in its own words."""
    packaging: Packaging = ADAPTERS[engine].packaging
    env = dict(packaging.probe_env)
    cannot = EngineStatus(name=engine, path=binary, runs=False, reason=Reason.EngineCannotRun)
    if not os.path.exists(binary):
        return cannot.model_copy(update={"message": f"{binary} does not exist"})
    if packaging.kind == "archive":
        missing = await missing_libraries(binary, packaging.plugins)
        if missing:
            return cannot.model_copy(update={"message": f"missing libraries: {', '.join(missing)}",
                                             "reason": Reason.MissingLibraries})
    r = await run(packaging.version_argv(binary), timeout=120.0, env=env)
    m = _VERSION.search(r.output)
    version = m.group(1)[:128] if m else ""
    if r.code != 0:
        words = _last_line(r.output) or f"exit {r.code}"
        return cannot.model_copy(update={"version": version, "message": words})
    return await checked(engine, binary, version)


async def engine_help(engine: str, binary: str) -> tuple[RunResult, list[str]]:
    """The engine's own help, run as its adapter says (vLLM: `serve --help=all`), and the command run."""
    packaging = ADAPTERS[engine].packaging
    argv = packaging.help_argv(binary)
    return await run(argv, timeout=120.0, env=dict(packaging.probe_env)), argv


async def worker_problem(engine: str, binary: str) -> tuple[str, str] | None:
    """The multi-node worker the engine's packaging names beside `binary` (llama.cpp's): (its path, "" if it runs,
    else its words); None for an engine without one."""
    packaging = ADAPTERS[engine].packaging
    if not packaging.worker:
        return None
    worker = os.path.join(os.path.dirname(binary), packaging.worker)
    r = await run([worker, "--help"], timeout=30.0)
    return worker, "" if r.code == 0 else (r.output.strip()[-200:] or f"exit {r.code}")


async def checked(engine: str, binary: str, version: str) -> EngineStatus:
    """An engine that starts, checked against the flags llmgw will pass it (its own --help): a renamed flag fails at
    the first model load otherwise, minutes in, on a node nobody is watching."""
    help_run, _ = await engine_help(engine, binary)
    report = check_flags(engine, help_run.output, multi_node=False)
    ok = EngineStatus(name=engine, version=version, path=binary, runs=True)
    if report.ok:
        return ok
    missing = ", ".join(report.missing)
    if report.warnings:  # a cut-off help text lists too few flags: the check proves nothing either way
        words = f"{'; '.join(report.warnings)}; flags not found in it: {missing}"
        return ok.model_copy(update={"message": words[:2000], "reason": Reason.EngineCheckInconclusive})
    words = f"lacks flag(s) llmgw passes: {missing} (renamed in this version?)"
    return ok.model_copy(update={"runs": False, "message": words[:2000], "reason": Reason.EngineFlagsMissing})


def builtin_status(name: str) -> EngineStatus:
    """An engine that is part of llmgw (sim) runs wherever the agent runs."""
    return EngineStatus(name=name, version=__version__, path=sys.executable, runs=True)


async def probe_named(overrides: dict[str, str], names: list[str]) -> list[EngineStatus]:
    """Those engines part of llmgw this node runs, and each engine agent.yaml names on purpose: never what happens
    to be on PATH."""
    out = [builtin_status(name) for name in ADAPTERS if builtin(name) and name in names]
    for name, path in sorted(overrides.items()):
        if name in names and name in ADAPTERS and not builtin(name):
            out.append(await probe(name, path))
    return out
