"""The OS packages a build needs, from the node's own package sources (apt).

A new machine runs apt itself in its first minutes (cloud-init, unattended-upgrades). apt-get then fails on a held
lock, which is not a failure of ours: it is retried for up to ten minutes and reported as waiting, not as broken.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from llmgw.agent.installs.probe import RunResult, run
from llmgw.core.clock import Clock
from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason

LOCK_WORDS = ("could not get lock", "unable to lock", "unable to acquire the dpkg frontend lock",
              "is another process using it")
LOCK_WAIT_S = 600.0
LOCK_RETRY_S = 10.0
WAITING = "waiting for another apt-get to finish"


def held_lock(output: str) -> bool:
    low = output.lower()
    return any(w in low for w in LOCK_WORDS)


@dataclass
class PackageTool:
    apt_get: str = "apt-get"
    dpkg_query: str = "dpkg-query"
    lock_wait: float = LOCK_WAIT_S
    lock_retry: float = LOCK_RETRY_S


async def missing_packages(tool: PackageTool, packages: list[str]) -> list[str] | None:
    """Those not installed; None when this node has no dpkg to ask (not Debian: the library check decides)."""
    out = []
    for p in packages:
        r = await run([tool.dpkg_query, "-W", "-f=${Status}", p], timeout=30.0)
        if r.code == 127:
            return None
        if "install ok installed" not in r.output:
            out.append(p)
    return out


Say = Callable[[str], None]
Sleep = Callable[[float], Awaitable[None]]


async def apt_install(tool: PackageTool, packages: list[str], say: Say, clock: Clock,
                      sleep: Sleep = asyncio.sleep) -> None:
    """Install `packages`; raises InstallRefused with apt's own words. A held lock is waited out (saying so)."""
    argv = [tool.apt_get, "install", "-y", "-q", "--no-install-recommends", *packages]
    started = clock.monotonic()
    updated = False
    while True:
        say(f"installing OS packages: {' '.join(packages)}")
        r: RunResult = await run(["env", "DEBIAN_FRONTEND=noninteractive", *argv], timeout=900.0,
                                 stop=signal.SIGTERM)
        if r.code == 0:
            return
        if held_lock(r.output):
            waited = clock.monotonic() - started
            if waited >= tool.lock_wait:
                raise InstallRefused(Reason.PackagesFailed,
                                     f"{WAITING} for {waited / 60:.0f} min; gave up for now: {_last(r.output)}")
            say(f"{WAITING} ({_last(r.output)})")
            await sleep(tool.lock_retry)
            continue
        if not updated and "unable to locate package" in r.output.lower():
            updated = True  # a new machine's package lists may be empty: read them once, then try again
            u = await run(["env", "DEBIAN_FRONTEND=noninteractive", tool.apt_get, "update", "-q"], timeout=900.0,
                          stop=signal.SIGTERM)
            if u.code == 0 or held_lock(u.output):
                continue
        raise InstallRefused(Reason.PackagesFailed,
                             f"cannot install {' '.join(packages)}: {_last(r.output)}")


def _last(output: str) -> str:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:300]
