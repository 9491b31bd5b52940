"""A source is a local path, a file inside an installed Python package, or an id the engine resolves itself (a
hub source, hf://, is none of these: the node fetches it into a directory, weights/directory.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from llmgw.wire.hub import is_hub

PKG_SCHEME = "pypkg://"
GGUF_MAGIC = b"GGUF"


def resolve_source(source: str) -> tuple[str | None, str]:
    """(path to give the engine, problem). Only absolute or explicitly relative paths are checked as files."""
    if source.startswith(PKG_SCHEME):
        pkg, _, rel = source[len(PKG_SCHEME) :].partition("/")
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):  # a dotted name whose parent is missing, or no name at all
            spec = None
        if spec is None or not spec.submodule_search_locations:
            return None, f"package {pkg} is not installed on this node"
        top = Path(next(iter(spec.submodule_search_locations))).resolve()
        path = (top / rel).resolve()  # links and `..` followed, as the engine opening it would
        if not path.is_relative_to(top) or path == top:
            return None, f"{source}: the path leads outside the package {pkg}"
        if not path.is_file() or path.stat().st_size == 0:
            return None, f"{path} is missing or empty"
        return str(path), ""
    if source.startswith(("/", "./", "../")):
        p = Path(source)
        if not p.exists():
            return None, f"weights not found on this node: {source}"
        if p.is_file() and p.stat().st_size == 0:
            return None, f"weights file is empty (an unfinished download?): {source}"
        if p.is_file() and p.suffix == ".gguf":
            try:
                with p.open("rb") as f:
                    head = f.read(4)
            except OSError as e:
                return None, f"weights file cannot be read: {source}: {e.strerror}"
            if head != GGUF_MAGIC:
                return None, f"weights file is not GGUF (starts {head!r}; an error page saved as weights?): {source}"
        return source, ""
    if is_hub(source):  # fetched into a directory first (launches.weights_path): never the engine's to fetch
        return None, f"{source}: a hub source is fetched by the node, not passed to the engine"
    return source, ""  # e.g. "Qwen/Qwen2.5-7B-Instruct": vLLM and SGLang fetch it themselves
