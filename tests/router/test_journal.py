"""The usage journal's segments on a real file system: lines copied into a reserved memory map, sealed to their
length, read back after a writer is killed, and written one by one where no space can be reserved."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.router.usage_journal import RESERVE, UNKNOWN, Journal, UsageJournal, maps_safely, read_segments
from llmgw.store.base import AnyUsage, Usage, new_usage_id

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def mapped(tmp_path: Path) -> Iterator[Path]:
    """A directory whose file system the journal maps (ext4, XFS, tmpfs): the test's own, else one in /dev/shm."""
    if maps_safely(tmp_path):
        yield tmp_path
        return
    d = Path(tempfile.mkdtemp(dir="/dev/shm"))
    assert maps_safely(d), f"neither {tmp_path} nor /dev/shm is a file system the journal maps"
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def usage(i: int, status: int = 200) -> Usage:
    return Usage(new_usage_id(), "k", "m", "r", 1, i, 1_700_000_000.0 + i, 0.5, status)


def run_writer(directory: Path, body: str, *, preamble: str = "") -> subprocess.CompletedProcess[str]:
    """A writer in a process of its own (killed, or limited, as the test says)."""
    code = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        from llmgw.router.usage_journal import Journal
        from llmgw.store.base import Usage
        {preamble}
        j = Journal(Path(sys.argv[1]))
    """) + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True, text=True, env=env,
                          timeout=60)


def test_a_sealed_segment_is_its_lines_and_nothing_more(mapped: Path) -> None:
    j = Journal(mapped)
    recs = [usage(i) for i in range(3)]
    for r in recs:
        j.append(r)
    live = j.path
    assert live.stat().st_size >= RESERVE  # while written: the reserved room, zeros after the lines
    old = j.rotate([])
    assert old == live
    assert old.read_bytes() == b"".join(r.json_line() for r in recs)  # sealed: exactly the lines
    assert [r.record() for r in recs] == sorted(read_segments([old]), key=lambda u: u.completion_tokens)
    j.close(keep=False)


def test_a_segment_grows_past_its_first_reservation(mapped: Path) -> None:
    j = Journal(mapped)
    recs = [usage(i) for i in range(RESERVE // 150 + 500)]  # more lines than the first reservation holds
    for r in recs:
        j.append(r)
    old = j.rotate([])
    assert old is not None and old.stat().st_size == sum(len(r.json_line()) for r in recs) > RESERVE
    assert len(read_segments([old])) == len(recs)
    j.close(keep=False)


@pytest.mark.real  # processes (tests/tiers.py)
def test_a_killed_writer_loses_no_line_the_kernel_had(mapped: Path) -> None:
    """SIGKILL right after the copies, no close, no seal: the lines are in the page cache, the segment still
    carries its reserved zeros and a torn line is at its end; the next process records every whole line once."""
    done = run_writer(mapped, """
        for i in range(50):
            j.append(Usage(f"rec{i:05d}", "k", "m", "r", 1, i, 1.7e9, 0.5, 200))
        j.append(Usage("inflight", "k", "m", "", 0, 0, 1.7e9, 0.0, 0))
        torn = Usage("torn00000", "k", "m", "r", 1, 1, 1.7e9, 0.5, 200).json_line()
        j._map[j._off : j._off + 20] = torn[:20]  # killed in the middle of a copy
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert done.returncode == -signal.SIGKILL, done.stderr
    (segment,) = mapped.glob("*.jsonl")
    assert segment.stat().st_size >= RESERVE and segment.read_bytes().endswith(b"\0")
    got: list[AnyUsage] = []

    async def sink(batch: list[AnyUsage]) -> None:
        got.extend(batch)

    import asyncio

    async def adopt() -> None:
        usage_journal = UsageJournal(sink, mapped, adopt=True)
        assert usage_journal.adopt_orphans() == 51
        assert await usage_journal.flush()
        await usage_journal.close()

    asyncio.run(adopt())
    assert sorted(u.id for u in got) == sorted([f"rec{i:05d}" for i in range(50)] + ["inflight"])
    assert next(u for u in got if u.id == "inflight").status == UNKNOWN
    assert not list(mapped.glob("*.jsonl"))  # recorded, then gone


@pytest.mark.real  # processes (tests/tiers.py)
def test_where_no_room_can_be_reserved_lines_are_written_one_by_one_and_a_full_disk_says_so(tmp_path: Path) -> None:
    """A file size limit below the reservation: posix_fallocate is refused (EFBIG), so lines go out by pwrite
    until the limit, then append raises and the line that did not fit leaves nothing behind."""
    done = run_writer(tmp_path, """
        written = 0
        try:
            for i in range(10_000):
                j.append(Usage(f"rec{i:05d}", "k", "m", "r", 1, i, 1.7e9, 0.5, 200))
                written += 1
        except OSError as e:
            print(written, e.errno)
        j.close(keep=True)
    """, preamble="import resource; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                  "resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))")
    assert done.returncode == 0, done.stderr
    written, err = map(int, done.stdout.split())
    assert 0 < written < 10_000 and err != 0
    (segment,) = tmp_path.glob("*.jsonl")
    data = segment.read_bytes()
    assert data.endswith(b"\n") and b"\0" not in data  # never mapped: no reserved zeros, no torn line
    assert len(read_segments([segment])) == written
