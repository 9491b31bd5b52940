"""A previous release, vendored (tests/fixtures/releases), run beside this tree: its processes import its own llmgw.

`unpack` gives the directory to put first on PYTHONPATH; `MixedCluster` is a planned cluster whose named processes
(the server, or an agent) run that release instead of this tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from llmgw.dev.cluster import Cluster, ClusterPlan

RELEASES = Path(__file__).resolve().parent / "fixtures" / "releases"
WIRE10 = RELEASES / "llmgw-wire10.tar.gz"  # the last release before leases


def unpack(into: Path, archive: Path = WIRE10) -> Path:
    """The release's `src` directory, unpacked under `into` (once)."""
    src = into / archive.name.removesuffix(".tar.gz") / "src"
    if not (src / "llmgw" / "__init__.py").exists():
        with tarfile.open(archive) as t:
            t.extractall(src.parent, filter="data")
    return src


def env_for(src: Path) -> dict[str, str]:
    """This process's environment with `src` as the only llmgw on the path (not this tree's)."""
    return {**os.environ, "PYTHONPATH": str(src)}


class MixedCluster(Cluster):
    """A cluster whose processes named in `older` ("server", "agent-node01") run the release unpacked at `src`."""

    def __init__(self, plan: ClusterPlan, src: Path, older: set[str]) -> None:
        super().__init__(plan)
        self.src = src
        self.older = older

    def _spawn(self, name: str, argv: list[str], netns: str | None = None) -> subprocess.Popen[bytes]:
        if name not in self.older:
            return super()._spawn(name, argv, netns)
        logs = self.plan.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / f"{name}.log").open("ab") as log:
            p = subprocess.Popen([sys.executable, "-m", "llmgw.cli.main", *argv], stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                 cwd=self.plan.workdir, env=env_for(self.src))
        self.procs[name] = p
        return p
