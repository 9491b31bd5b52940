"""The unpacked-size limit also counts hardlinks that tarfile extracts as fresh copies of their member, so an
archive cannot fill the node's disk past `unpack_bytes`."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from llmgw.agent.installs.unpack import unpack


async def test_hardlinks_to_a_missing_path_cannot_write_past_the_size_limit(tmp_path: Path) -> None:
    big = 1 << 20
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        f = tarfile.TarInfo("big")
        f.size = big
        tar.addfile(f, io.BytesIO(b"\0" * big))
        for i in range(40):
            h = tarfile.TarInfo(f"h{i}")
            h.type, h.linkname = tarfile.LNKTYPE, "nosuch/../big"
            tar.addfile(h)
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(buf.getvalue())
    dest = tmp_path / "staging"
    dest.mkdir()
    limit = 4 * big
    try:
        await unpack(archive, dest, limit)
    except Exception as e:
        print("\nrefused as:", getattr(e, "reason", type(e).__name__), str(e)[:150])
    written = sum(p.stat().st_blocks * 512 for p in dest.iterdir() if p.is_file())
    inodes = len({p.stat().st_ino for p in dest.iterdir()})
    print(f"\n{len(buf.getvalue())} bytes of archive wrote {written} bytes in {inodes} files (limit {limit})")
    assert written <= limit, f"wrote {written} bytes, limit {limit}"
