"""The two ways an engine build reaches a node: a release archive unpacked, or a virtual environment filled by
pip, each in a directory of its own and marked installed only once the engine ran and was checked. Every attempt
builds a new directory (`<version>-<variant>`, then `.2`, ...) and touches no other, so a failed attempt leaves
every working build, and the shards running from it, as they were."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from llmgw.agent.engines import ADAPTERS
from llmgw.agent.installs import libc_floor
from llmgw.agent.installs.companion import unpack_beside
from llmgw.agent.installs.digests import pinned
from llmgw.agent.installs.download import download
from llmgw.agent.installs.packages import PackageTool, apt_install, missing_packages
from llmgw.agent.installs.probe import probe, run
from llmgw.agent.installs.unpack import ARCHIVE_SUFFIXES, find_executable, unpack
from llmgw.agent.redirects import PUBLIC_ONLY, Redirects
from llmgw.agent.supervisor.process import write_private
from llmgw.core.clock import Clock
from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason
from llmgw.core.units import mb
from llmgw.wire.digest_lists import file_name
from llmgw.wire.engines import EngineSource, EngineVariant
from llmgw.wire.messages import EngineStatus

MARKER = ".llmgw-installed.json"
STAGING = ".staging-"
DOWNLOADS = ".downloads"
Say = Callable[[str], None]
Step = Literal["downloading", "unpacking", "installing", "checking"]
# where an attempt is, as numbers beside its words: (step, bytes done, bytes in all when known)
Mark = Callable[[Step, int, int | None], None]
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,200}$")


@dataclass(frozen=True)
class Limits:
    download_bytes: int = 16 << 30
    download_seconds: float = 4 * 3600.0
    unpack_bytes: int = 32 << 30
    pip_timeout: float = 3600.0


@dataclass
class Context:
    root: Path  # <root>/<engine>/<version>-<variant>[.N]/ per build; <root>/.downloads/ for archives in flight
    clock: Clock
    packages: PackageTool
    python: str  # the interpreter virtual environments are made from
    limits: Limits
    redirects: Redirects = PUBLIC_ONLY  # where a release server may send the node


def base_name(source: EngineSource, variant: EngineVariant) -> str:
    return f"{source.version}-{variant.variant}"


def _generation(d: Path, base: str) -> int:
    """1 for `base`, N for `base.N`, 0 for anything else."""
    if d.name == base:
        return 1
    head, _, n = d.name.rpartition(".")
    return int(n) if head == base and n.isdigit() else 0


def builds(root: Path, source: EngineSource, variant: EngineVariant) -> list[Path]:
    """Every directory an attempt at this build made, oldest first."""
    base, engine_dir = base_name(source, variant), root / source.name
    if not engine_dir.is_dir():
        return []
    found = [(g, d) for d in engine_dir.iterdir() if (g := _generation(d, base)) and d.is_dir()]
    return [d for _, d in sorted(found)]


def current_build(root: Path, source: EngineSource, variant: EngineVariant) -> tuple[Path, dict[str, str]] | None:
    """The newest attempt that was marked installed, with its marker."""
    marked = [(d, m) for d in builds(root, source, variant) if (m := read_marker(d)) is not None]
    return marked[-1] if marked else None


def newest_installed(root: Path, engine: str) -> str | None:
    """The executable of the most recently installed build of `engine`, whatever its version."""
    found = [(d.stat().st_mtime, str(d / m["executable"])) for d in (root / engine).glob("*")
             if d.is_dir() and (m := read_marker(d)) is not None]
    return max(found)[1] if found else None


def next_build(root: Path, source: EngineSource, variant: EngineVariant) -> Path:
    made = builds(root, source, variant)
    base = base_name(source, variant)
    n = max((_generation(d, base) for d in made), default=0)
    return root / source.name / (base if n == 0 else f"{base}.{n + 1}")


def read_marker(d: Path) -> dict[str, str] | None:
    try:
        data = json.loads((d / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("executable"), str) else None


def write_marker(d: Path, data: dict[str, str]) -> None:
    write_private(d / MARKER, json.dumps(data, sort_keys=True))


def _file_name(url: str, fallback: str) -> str:
    """The URL's file name, when that is a plain archive name; `fallback` otherwise."""
    name = file_name(url)
    return name if _SAFE_NAME.match(name) and name.endswith(ARCHIVE_SUFFIXES) else fallback


def archive_name(source: EngineSource, variant: EngineVariant) -> str:
    """The file name the archive is kept under while it downloads: the URL's, when that is a plain name."""
    return _file_name(variant.url, f"{source.name}-{base_name(source, variant)}.tar.gz")


def runtime_name(source: EngineSource, variant: EngineVariant) -> str:
    """The same for the build's runtime companion."""
    return _file_name(variant.runtime_url, f"{source.name}-{base_name(source, variant)}-runtime.tar.gz")


def _kept_as(url: str, sha256: str, name: str) -> str:
    """Under its digest too, so two versions served under one file name never resume each other's partial file;
    under its URL's hash when the digest is read from the release only during the attempt."""
    key = sha256 or hashlib.sha256(url.encode()).hexdigest()
    return f"{key[:16]}-{name}"


def download_name(source: EngineSource, variant: EngineVariant) -> str:
    """Where the archive's download is kept."""
    return _kept_as(variant.url, variant.sha256, archive_name(source, variant))


def runtime_download_name(source: EngineSource, variant: EngineVariant) -> str:
    return _kept_as(variant.runtime_url, variant.runtime_sha256, runtime_name(source, variant))


def download_names(source: EngineSource, variant: EngineVariant) -> set[str]:
    """Where each download of this build is kept: the archive's, and its runtime companion's."""
    names = {download_name(source, variant)}
    if variant.runtime_url:
        names.add(runtime_download_name(source, variant))
    return names


@contextmanager
def _removed_unless_done(d: Path, what: str) -> Iterator[None]:
    """`d` is this attempt's own: it goes if the attempt does not finish, whatever stopped it."""
    try:
        yield
    except OSError as e:
        shutil.rmtree(d, ignore_errors=True)
        raise InstallRefused.from_os(e, what) from None
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise


def unmarked(step: Step, done: int, total: int | None) -> None:
    """For a caller that wants the words alone."""


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


async def _download(ctx: Context, url: str, name: str, kept_as: str, sha256: str, say: Say, mark: Mark) -> Path:
    def progress(done: int, total: int | None) -> None:
        say(f"downloading {name}, {mb(done)}" + (f" of {mb(total)}" if total else ""))
        mark("downloading", done, total)

    mark("downloading", 0, None)
    return await download(url, ctx.root / DOWNLOADS / kept_as, sha256, progress, ctx.limits.download_bytes,
                          deadline=ctx.limits.download_seconds, redirects=ctx.redirects)


@contextmanager
def _dropped_if_unsafe(archive: Path) -> Iterator[None]:
    try:
        yield
    except InstallRefused as e:
        if e.reason == Reason.ArchiveUnsafe:
            archive.unlink(missing_ok=True)  # it will not be better next time; fetched again if it is fixed
        raise


async def install_archive(ctx: Context, source: EngineSource, variant: EngineVariant, say: Say,
                          mark: Mark = unmarked, glibc: str = "") -> EngineStatus:
    name, rt_name = archive_name(source, variant), runtime_name(source, variant)
    final = next_build(ctx.root, source, variant)
    staging = final.with_name(STAGING + final.name)
    head = f"installing {source.name} {source.version}"

    def said(words: str) -> None:
        say(f"{head}: {words}")

    downloads = ctx.root / DOWNLOADS
    try:
        downloads.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InstallRefused.from_os(e, f"cannot make {downloads}") from None
    mark("downloading", 0, None)
    pins = await pinned(source, variant, downloads, ctx.redirects)
    archive = await _download(ctx, variant.url, name, download_name(source, variant), pins.sha256, said, mark)
    runtime = None
    if variant.runtime_url:
        runtime = await _download(ctx, variant.runtime_url, f"{rt_name} (its runtime libraries)",
                                  runtime_download_name(source, variant),
                                  pins.runtime_sha256, said, mark)
    shutil.rmtree(staging, ignore_errors=True)  # a cancelled attempt's, at this same name
    with _removed_unless_done(staging, f"installing {name}"):
        staging.mkdir(parents=True)
        said(f"unpacking {name}")
        mark("unpacking", 0, None)
        with _dropped_if_unsafe(archive):
            await unpack(archive, staging, ctx.limits.unpack_bytes)
        wanted = ADAPTERS[source.name].packaging.executable
        exe = find_executable(staging, wanted)
        if exe is None:
            raise InstallRefused(Reason.EngineInstallFailed, f"{name} holds no {wanted}")
        if runtime is not None:
            said(f"unpacking {rt_name} beside {wanted}")
            with _dropped_if_unsafe(runtime):
                await unpack_beside(runtime, rt_name, staging, exe.parent, ctx.limits.unpack_bytes, frozenset({MARKER}))
        # what its own files need of the C library, before any of it runs (the variant's stated floor, if any, was
        # checked before the download; this one is read, and holds for builds that state none)
        build = f"{variant.variant} of {source.name} {source.version}"
        await asyncio.to_thread(libc_floor.check, staging, glibc, build)
        mark("installing", 0, None)
        await _os_packages(ctx, variant, said)
        said("checking that it runs")
        mark("checking", 0, None)
        status = await _verified(source.name, exe)
        rel = exe.relative_to(staging)
        marker = {"engine": source.name, "version": source.version, "variant": variant.variant,
                  "executable": str(rel), "sha256": pins.sha256}
        write_marker(staging, marker | ({"runtime_sha256": pins.runtime_sha256} if runtime is not None else {}))
        os.rename(staging, final)  # a new name: nothing there to replace
    for done in (archive, runtime):
        if done is not None:
            done.unlink(missing_ok=True)
    return status.model_copy(update={"path": str(final / rel)})


def _alias(env: Path, dist: str, version: str) -> None:
    """A one-file distribution record answering for `dist`, for a CLI that asks for itself by another name."""
    for site in env.glob("lib/python*/site-packages"):
        meta = site / f"{dist}-{version}.dist-info"
        meta.mkdir(exist_ok=True)
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


async def install_pip(ctx: Context, source: EngineSource, variant: EngineVariant, say: Say,
                      mark: Mark = unmarked) -> EngineStatus:
    packaging = ADAPTERS[source.name].packaging
    final = next_build(ctx.root, source, variant)  # a new directory: a virtual environment cannot be moved
    head = f"installing {source.name} {source.version}"
    with _removed_unless_done(final, f"installing {source.name} {source.version}"):
        final.parent.mkdir(parents=True, exist_ok=True)
        mark("installing", 0, None)  # pip says nothing countable: its step is all there is
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
        if variant.variant.startswith("cpu-"):  # the adapter's repairs are for its CPU build (a CUDA one is whole)
            if packaging.uninstall:
                await run([str(final / "bin" / "pip"), "uninstall", "-y", "-q", *packaging.uninstall],
                          timeout=300.0)
            dist, suffix = packaging.dist_alias
            if dist and not any(final.glob(f"lib/python*/site-packages/{dist}-*.dist-info")):
                _alias(final, dist, source.version + suffix)
        say(f"{head}: checking that it runs")
        mark("checking", 0, None)
        exe = final / packaging.executable
        status = await _verified(source.name, exe)
        write_marker(final, {"engine": source.name, "version": source.version, "variant": variant.variant,
                             "executable": packaging.executable, "requirements": "\n".join(variant.requirements)})
    return status.model_copy(update={"path": str(exe)})


async def install(ctx: Context, source: EngineSource, variant: EngineVariant, say: Say,
                  mark: Mark = unmarked, glibc: str = "") -> EngineStatus:
    """`glibc`: the node's C library ("" when not glibc, or not read), which an archive's binaries are held to."""
    kind = ADAPTERS[source.name].packaging.kind
    if kind == "archive":
        if not variant.url:
            raise InstallRefused(Reason.EngineInstallFailed, f"{variant.variant}: {source.name} needs an archive url")
        return await install_archive(ctx, source, variant, say, mark, glibc)
    if kind == "pip":
        if not variant.requirements:
            raise InstallRefused(Reason.EngineInstallFailed, f"{variant.variant}: {source.name} needs requirements")
        return await install_pip(ctx, source, variant, say, mark)
    raise InstallRefused(Reason.EngineInstallFailed, f"{source.name} is part of llmgw and is not installed")


def stale_downloads(root: Path, keep: set[str]) -> list[Path]:
    """Downloads, whole or partial, of archives no longer wanted: nothing will resume or read them."""
    downloads = root / DOWNLOADS
    if not downloads.is_dir():
        return []
    return [f for f in downloads.iterdir() if f.name.removesuffix(".part") not in keep]
