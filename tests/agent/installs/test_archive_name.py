"""A release URL without a tar suffix is saved under a name unpack accepts (else it would be downloaded, refused
and downloaded again at every retry)."""

from __future__ import annotations

from llmgw.agent.installs.recipes import archive_name
from llmgw.agent.installs.unpack import ARCHIVE_SUFFIXES
from llmgw.wire.engines import EngineSource, EngineVariant


def test_a_url_without_a_tar_suffix_gets_a_name_unpack_accepts() -> None:
    v = EngineVariant(variant="cpu-x86_64", url="https://releases.example/llama/b1/download", sha256="0" * 64)
    name = archive_name(EngineSource(name="llamacpp", version="b1", variants=[v]), v)
    assert name.endswith(ARCHIVE_SUFFIXES), f"kept as {name!r}: unpack refuses it as not a tar archive"
