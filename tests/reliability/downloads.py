"""What the node-side checks (8: the agent killed mid-download, 12: a full disk) download from a local release
server: a llama.cpp build as an engine source, and a model's weights pinned by digest and size."""

from __future__ import annotations

import hashlib
from typing import Any

from tests.agent.installs.archives import sha256
from tests.agent.installs.release import Release

VERSION = "b9"
ARCHIVE = f"llama-{VERSION}-bin-ubuntu-x64.tar.gz"
WEIGHTS = "w.gguf"


def served(srv: Release, archive: bytes, weights: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the engine source naming the archive, model "w" on llama.cpp naming the weights), both on `srv`."""
    source = {"name": "llamacpp", "version": VERSION,
              "variants": [{"variant": "cpu-x86_64", "url": srv.url(ARCHIVE), "sha256": sha256(archive)}]}
    model = {"name": "w", "source": srv.url(WEIGHTS), "sha256": hashlib.sha256(weights).hexdigest(),
             "size": len(weights), "engine": "llamacpp", "profile": {"memory": "256Mi"},
             "scaling": {"min": 1, "max": 1}}
    return source, model
