"""The manifest of a hub directory is written as a file of its own: a plan naming a file where the manifest goes
fails the layout, and the fetched, verified file that entry links to is never written through."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from llmgw.agent.weights import hubdir, local
from llmgw.wire.hub import HubFile, file_url
from llmgw.wire.messages import WeightsPlan

COMMIT = "c" * 40
SOURCE = f"hf://acme/m@{COMMIT}"
BASE = f"https://hub.example/acme/m/resolve/{COMMIT}"


def fetched(wd: Path, f: HubFile, body: bytes) -> Path:
    t = hubdir.target(wd, BASE, f)
    t.parent.mkdir(parents=True, exist_ok=True)
    local.record(t.parent, file_url(BASE, f.path), len(body), hashlib.sha256(body).hexdigest(), part_of=SOURCE)
    t.write_bytes(body)
    return t


def test_a_file_named_like_the_manifest_fails_the_layout_and_is_not_written(tmp_path: Path) -> None:
    body = b'{"vocab": 1}'
    f = HubFile(path=local.HUB_MANIFEST, size=len(body), sha256=hashlib.sha256(body).hexdigest())
    w = HubFile(path="model.safetensors", size=3, sha256=hashlib.sha256(b"abc").hexdigest())
    t = fetched(tmp_path, f, body)
    fetched(tmp_path, w, b"abc")
    with pytest.raises(OSError):
        hubdir.assemble(tmp_path, SOURCE, WeightsPlan(files=[f, w], base_url=BASE))
    assert t.read_bytes() == body, "the verified file was overwritten by the manifest"
    assert not hubdir.dir_for(tmp_path, SOURCE).exists()
