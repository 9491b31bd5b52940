"""The two ways an engine build reaches a node: a release archive unpacked into a directory of its own, or a
virtual environment of its own filled by pip. Each ends with the engine run and checked; only then is its
directory marked installed. A failure leaves every other version's directory as it was."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from llmgw.agent.engines import ADAPTERS
from llmgw.agent.installs.download import download, mb
from llmgw.agent.installs.packages import PackageTool, apt_install, missing_packages
from llmgw.agent.installs.probe import probe, run
from llmgw.agent.installs.unpack import find_executable, unpack
from llmgw.core.clock import Clock
from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason
from llmgw.wire.engines import EngineSource, EngineVariant
from llmgw.wire.messages import EngineStatus

MARKER = ".llmgw-installed.json"
Say = Callable[[str], None]


@dataclass(frozen=True)
class Limits:
    download_bytes: int = 16 << 30
    unpack_bytes: int = 32 << 30
    pip_timeout: float = 3600.0


@dataclass
class Context:
    root: Path  # <root>/<engine>/<version>-<variant>/ per build; <root>/.downloads/ for archives in flight
    clock: Clock
    packages: PackageTool
    python: str  # the interpreter virtual environments are made from
    limits: Limits


def build_dir(root: Path, source: EngineSource, variant: EngineVariant) -> Path:
    return root / source.name / f"{source.version}-{variant.variant}"


def read_marker(d: Path) -> dict[str, str] | None:
    try:
        data = json.loads((d / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("executable"), str) else None


def write_marker(d: Path, data: dict[str, str]) -> None:
    tmp = d / (MARKER + ".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, d / MARKER)


def _disk(e: OSError, what: str) -> InstallRefused:
    return InstallRefused(Reason.DiskFull if e.errno == 28 else Reason.EngineInstallFailed,
                          f"{what}: {e.strerror or e}")


async def _os_packages(ctx: Context, variant: EngineVariant, say: Say) -> None:
    if not variant.packages:
        return
    missing = await missing_packages(ctx.packages, list(variant.packages))
    if missing:
        await apt_install(ctx.packages, missing, say, ctx.clock)


async def _verified(engine: str, executable: Path) -> EngineStatus:
    status = await probe(engine, str(executable))
    if not status.runs:
        raise InstallRefused(status.reason or Reason.EngineCannotRun,
                             f"{executable.name} does not run: {status.message}")
    return status


async def install_archive(ctx: Context, source: EngineSource, variant: EngineVariant, say: Say) -> EngineStatus:
    name = os.path.basename(urlparse(variant.url).path) or f"{source.name}-{source.version}.tar.gz"
    downloads = ctx.root / ".downloads"
    final = build_dir(ctx.root, source, variant)
    staging = final.with_name(f".staging-{final.name}")
    head = f"installing {source.name} {source.version}"

    def progress(done: int, total: int | None) -> None:
        say(f"{head}: downloading {name}, {mb(done)}" + (f" of {mb(total)}" if total else ""))

    try:
        downloads.mkdir(parents=True, exist_ok=True)
        archive = await download(variant.url, downloads / name, variant.sha256, progress, ctx.limits.download_bytes)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    except OSError as e:
        raise _disk(e, f"cannot prepare {staging}") from None
    try:
        say(f"{head}: unpacking {name}")
        unpack(archive, staging, ctx.limits.unpack_bytes)
        exe = find_executable(staging, ADAPTERS[source.name].packaging.executable)
        if exe is None:
            raise InstallRefused(Reason.EngineInstallFailed,
                                 f"{name} holds no {ADAPTERS[source.name].packaging.executable}")
        await _os_packages(ctx, variant, lambda w: say(f"{head}: {w}"))
        say(f"{head}: checking that it runs")
        status = await _verified(source.name, exe)
        rel = exe.relative_to(staging)
        write_marker(staging, {"engine": source.name, "version": source.version, "variant": variant.variant,
                               "executable": str(rel), "sha256": variant.sha256})
        shutil.rmtree(final, ignore_errors=True)  # an earlier attempt at this same build, never marked
        os.replace(staging, final)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise _disk(e, f"installing {name}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    archive.unlink(missing_ok=True)
    return status.model_copy(update={"path": str(final / rel)})


def _alias(env: Path, dist: str, version: str) -> None:
    """A one-file distribution record answering for `dist`, for a CLI that asks for itself by another name."""
    for site in env.glob("lib/python*/site-packages"):
        meta = site / f"{dist}-{version}.dist-info"
        meta.mkdir(exist_ok=True)
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


async def install_pip(ctx: Context, source: EngineSource, variant: EngineVariant, say: Say) -> EngineStatus:
    packaging = ADAPTERS[source.name].packaging
    final = build_dir(ctx.root, source, variant)
    head = f"installing {source.name} {source.version}"
    try:
        shutil.rmtree(final, ignore_errors=True)  # never marked: an earlier attempt that stopped part way
        final.parent.mkdir(parents=True, exist_ok=True)
        await _os_packages(ctx, variant, lambda w: say(f"{head}: {w}"))
        say(f"{head}: creating its Python environment ({ctx.python})")
        r = await run([ctx.python, "-m", "venv", str(final)], timeout=300.0)
        if r.code != 0:
            raise InstallRefused(Reason.EngineInstallFailed, f"cannot make a virtual environment: {r.output[-300:]}")
        req = final / "llmgw-requirements.txt"
        req.write_text("\n".join(variant.requirements) + "\n")
        say(f"{head}: pip install {' '.join(variant.requirements)[:200]}")
        r = await run([str(final / "bin" / "pip"), "install", "-q", "-r", str(req)], timeout=ctx.limits.pip_timeout)
        if r.code != 0:
            lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
            raise InstallRefused(Reason.EngineInstallFailed, "pip install failed: " + " ".join(lines[-3:])[-600:])
        if packaging.uninstall:
            await run([str(final / "bin" / "pip"), "uninstall", "-y", "-q", *packaging.uninstall], timeout=300.0)
        dist, suffix = packaging.dist_alias
        if dist:
            _alias(final, dist, source.version + suffix)
        say(f"{head}: checking that it runs")
        exe = final / packaging.executable
        status = await _verified(source.name, exe)
        write_marker(final, {"engine": source.name, "version": source.version, "variant": variant.variant,
                             "executable": packaging.executable, "requirements": "\n".join(variant.requirements)})
    except OSError as e:
        shutil.rmtree(final, ignore_errors=True)
        raise _disk(e, f"installing {source.name} {source.version}") from None
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise
    return status.model_copy(update={"path": str(exe)})


async def install(ctx: Context, source: EngineSource, variant: EngineVariant, say: Say) -> EngineStatus:
    kind = ADAPTERS[source.name].packaging.kind
    if kind == "archive":
        if not variant.url:
            raise InstallRefused(Reason.EngineInstallFailed, f"{variant.variant}: {source.name} needs an archive url")
        return await install_archive(ctx, source, variant, say)
    if kind == "pip":
        if not variant.requirements:
            raise InstallRefused(Reason.EngineInstallFailed, f"{variant.variant}: {source.name} needs requirements")
        return await install_pip(ctx, source, variant, say)
    raise InstallRefused(Reason.EngineInstallFailed, f"{source.name} is part of llmgw and is not installed")
