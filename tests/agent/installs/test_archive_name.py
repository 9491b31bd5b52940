"""Second review (functional): recipes.archive_name keeps a URL's own file name whenever it is "plain"
(recipes.py:106-109), but unpack refuses any name without a tar suffix (unpack.py:102-104) as ArchiveUnsafe, and
install_archive then deletes the verified download (recipes.py:166-167). A release URL without a suffix
(a redirector such as .../download?id=..., .../latest) is downloaded, verified, refused and downloaded again at every
retry, for ever; the fallback name `<engine>-<build>.tar.gz` exists but is used only for names that are not plain."""

from __future__ import annotations

from llmgw.agent.installs.recipes import archive_name
from llmgw.agent.installs.unpack import ARCHIVE_SUFFIXES
from llmgw.wire.engines import EngineSource, EngineVariant


def test_a_url_without_a_tar_suffix_gets_a_name_unpack_accepts() -> None:
    v = EngineVariant(variant="cpu-x86_64", url="https://releases.example/llama/b1/download", sha256="0" * 64)
    name = archive_name(EngineSource(name="llamacpp", version="b1", variants=[v]), v)
    assert name.endswith(ARCHIVE_SUFFIXES), f"kept as {name!r}: unpack refuses it as not a tar archive"
