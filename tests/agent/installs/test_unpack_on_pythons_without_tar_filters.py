"""An agent on a Python without tarfile's extraction filters (before 3.11.4: Debian 12's 3.11.2, the bundle's
target) still unpacks a release archive, and still refuses a hostile one by its own checks. Run in a child Python
whose tarfile has the filters taken away, as such a Python's has none."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.agent.installs.archives import file_member, link_member

pytestmark = pytest.mark.real  # a child Python

CHILD = """
import sys, tarfile
for name in ("data_filter", "tar_filter", "FilterError"):  # (this Python's own extract needs the third)
    if hasattr(tarfile, name):
        delattr(tarfile, name)
_extract = tarfile.TarFile.extract
def extract(self, member, path="", set_attrs=True, *, numeric_owner=False, **kw):  # 3.11.2's: no filter argument
    if kw:
        raise TypeError(f"extract() got an unexpected keyword argument {next(iter(kw))!r}")
    return _extract(self, member, path, set_attrs, numeric_owner=numeric_owner)
tarfile.TarFile.extract = extract
from pathlib import Path
from llmgw.agent.installs.unpack import unpack_here
from llmgw.core.errors import InstallRefused
try:
    unpack_here(Path(sys.argv[1]), Path(sys.argv[2]), 1 << 20)
except InstallRefused as e:
    print(f"refused {e.reason}: {e}")
    sys.exit(3)
print("unpacked")
"""


def _archive(path: Path, *members: object) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for add in members:
            add(tar)  # type: ignore[operator]
    path.write_bytes(buf.getvalue())
    return path


def _unpack(archive: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    dest.mkdir()
    return subprocess.run([sys.executable, "-c", CHILD, str(archive), str(dest)], capture_output=True, text=True,
                          timeout=60)


def test_a_release_archive_unpacks_without_filters(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "llama-b1-bin-ubuntu-x64.tar.gz", file_member("llama-b1/llama-server", b"#!", 0o755),
                       link_member("llama-b1/libggml.so", "libggml.so.0"), file_member("llama-b1/libggml.so.0"))
    r = _unpack(archive, tmp_path / "out")
    assert (r.returncode, r.stdout.strip()) == (0, "unpacked"), r.stderr[-2000:]
    assert (tmp_path / "out" / "llama-b1" / "llama-server").read_bytes() == b"#!"
    assert (tmp_path / "out" / "llama-b1" / "libggml.so").is_symlink()


def test_a_hostile_archive_is_still_refused_without_filters(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "evil.tar.gz", link_member("x/escape", "../../etc"), file_member("x/escape/passwd"))
    r = _unpack(archive, tmp_path / "out")
    assert r.returncode == 3 and r.stdout.startswith("refused ArchiveUnsafe"), (r.stdout, r.stderr[-2000:])
    assert not (tmp_path / "etc").exists()
