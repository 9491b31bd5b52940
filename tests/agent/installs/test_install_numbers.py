"""An install under way as numbers beside its words: the step it is in, and for a download the bytes so far and in
all, as the node reports them (NodeReport.installs). Held at the release server, so the test looks mid-download."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from llmgw.agent.installs.installer import COUNT_MAX, Installer, Track
from llmgw.agent.installs.recipes import Step, install
from llmgw.wire.engines import EngineSource
from llmgw.wire.messages import InstallStatus
from tests.agent.installs.fake_builds import fake_archive, fake_server_script
from tests.agent.installs.release import CHUNK, Release, release_server
from tests.agent.installs.test_install import context, name_of, publish
from tests.agent.installs.test_installer import X86, settle
from tests.harness import await_until


def downloading(inst: Installer) -> InstallStatus | None:
    got = inst.installs()
    return got[0] if got and got[0].step == "downloading" and got[0].done_bytes > 0 else None


async def test_a_download_under_way_reports_its_bytes_done_and_in_all(tmp_path: Path) -> None:
    with release_server(Release()) as rel:
        archive = fake_archive("b1", fake_server_script(), pad=1 << 20)  # random bytes: as large gzipped
        assert len(archive) > 2 * CHUNK
        source = publish(rel, "b1", archive)
        gate = rel.hold[name_of("b1")] = threading.Event()  # one chunk is sent, then the server waits
        inst = Installer(context(tmp_path / "engines"))
        try:
            await inst.converge([source], X86, set())
            st = await await_until(lambda: downloading(inst), 10, "the download under way")
            assert st.engine == "llamacpp" and st.version == "b1"
            assert 0 < st.done_bytes <= CHUNK < len(archive), "no more than the server has sent"
            assert st.total_bytes == len(archive), "the size the server announced"
            assert "downloading" in inst.progress()[0], "the words say the same"
            gate.set()
            await settle(inst)
            assert inst.statuses()[0].runs, inst.statuses()
            assert inst.installs() == [], "only installs under way are reported"
        finally:
            gate.set()
            await inst.close()


async def test_each_step_in_order_and_only_the_download_counts_bytes(tmp_path: Path) -> None:
    with release_server(Release()) as rel:
        archive = fake_archive("b1", fake_server_script())
        source = publish(rel, "b1", archive)
        marks: list[tuple[Step, int, int | None]] = []
        await install(context(tmp_path / "engines"), source, source.variants[0], lambda w: None,
                      lambda step, done, total: marks.append((step, done, total)))
    steps = [s for i, (s, _, _) in enumerate(marks) if i == 0 or marks[i - 1][0] != s]
    assert steps == ["downloading", "unpacking", "installing", "checking"], marks
    assert marks[0] == ("downloading", 0, None), "downloading before the server has said a size"
    last = [m for m in marks if m[0] == "downloading"][-1]
    assert last == ("downloading", len(archive), len(archive))
    assert all(done == 0 and total is None for s, done, total in marks if s != "downloading")


async def test_a_servers_claim_of_an_absurd_size_stays_within_the_wire(tmp_path: Path) -> None:
    inst = Installer(context(tmp_path / "engines"))
    t = inst.tracks["llamacpp"] = Track(source=EngineSource(name="llamacpp", version="b1"))
    async def forever() -> None:
        await asyncio.Event().wait()

    t.task = asyncio.create_task(forever())  # an install under way, as far as the report can tell
    try:
        t.step, t.done_bytes, t.total_bytes = "downloading", 10, 2**80
        assert inst.installs() == [InstallStatus(engine="llamacpp", version="b1", step="downloading", done_bytes=10,
                                                 total_bytes=COUNT_MAX)]
    finally:
        await inst.close()
