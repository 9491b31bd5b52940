"""The installer as the agent drives it: every pass, with the injected clock. Failed attempts back off from a
minute to ten; an installed build is checked again every ten minutes; a build no longer wanted is removed only
once no shard runs from it; what the node reports is always what it has seen."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.agent.installs.installer import Installer
from llmgw.core.clock import FakeClock
from llmgw.wire.engines import EngineSource
from llmgw.wire.messages import Hardware
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import context, good, name_of, publish

X86 = Hardware(arch="x86_64")


async def settle(inst: Installer) -> None:
    await asyncio.gather(*[x for t in inst.tracks.values() for x in (t.check, t.task) if x is not None])


def downloads(rel: Release, version: str) -> int:
    return sum(1 for name, _ in rel.ranges if name == name_of(version))


async def test_a_failed_install_is_retried_after_a_minute_backing_off_to_ten(tmp_path: Path) -> None:
    with release_server(Release()) as rel:
        source = publish(rel, "b1", good("b1"))
        del rel.files[name_of("b1")]  # the release is not there (yet)
        ctx = context(tmp_path / "engines")
        clock = ctx.clock
        assert isinstance(clock, FakeClock)
        inst = Installer(ctx)
        gaps = []
        for attempt in range(1, 7):
            await inst.converge([source], X86, set())
            await settle(inst)
            assert downloads(rel, "b1") == attempt
            (st,) = inst.statuses()
            assert not st.runs and st.reason == "DownloadFailed" and "answered 404" in st.message, st
            waited = 0.0
            while downloads(rel, "b1") == attempt:
                clock.advance(10)
                waited += 10
                await inst.converge([source], X86, set())
                await settle(inst)
                assert waited <= 600, "retried within ten minutes"
            gaps.append(waited)
        assert gaps == [60, 120, 240, 480, 600, 600]


async def test_an_installed_build_is_checked_again_every_ten_minutes_and_repaired(tmp_path: Path) -> None:
    with release_server(Release()) as rel:
        source = publish(rel, "b1", good("b1"))
        ctx = context(tmp_path / "engines")
        assert isinstance(ctx.clock, FakeClock)
        inst = Installer(ctx)
        await inst.converge([source], X86, set())
        (st,) = inst.statuses()
        assert st.reason == "EngineInstalling" and st.message.startswith("installing llamacpp b1")
        await settle(inst)
        (st,) = inst.statuses()
        assert st.runs, st
        build = Path(st.path).parent
        for lib in build.glob("libggml-base.so*"):
            lib.unlink()  # an unrelated upgrade took a library away
        ctx.clock.advance(599)
        await inst.converge([source], X86, set())
        assert inst.statuses()[0].runs, "not looked at again before ten minutes"
        ctx.clock.advance(1)
        await inst.converge([source], X86, set())
        assert inst.statuses()[0].runs, "the re-check runs beside the heartbeat, which reports the last verdict"
        await settle(inst)
        (broken,) = inst.statuses()
        assert not broken.runs and broken.reason == "MissingLibraries" and "libggml-base" in broken.message
        await inst.converge([source], X86, set())  # the next pass acts on it: installed again
        await settle(inst)
        (st,) = inst.statuses()
        assert st.runs and downloads(rel, "b1") == 2, "reinstalled whole"


async def test_a_build_no_longer_wanted_goes_only_when_no_shard_runs_from_it(tmp_path: Path) -> None:
    with release_server(Release()) as rel:
        b1, b2 = publish(rel, "b1", good("b1")), publish(rel, "b2", good("b2"))
        ctx = context(tmp_path / "engines")
        inst = Installer(ctx)
        await inst.converge([b1], X86, set())
        await settle(inst)
        old = Path(inst.statuses()[0].path)
        shard_binary_dir = old.parent
        await inst.converge([b2], X86, {shard_binary_dir})
        await settle(inst)
        assert inst.statuses()[0].version == "0.6.0-dev" and "b2-cpu-x86_64" in inst.statuses()[0].path
        await inst.converge([b2], X86, {shard_binary_dir})
        assert old.exists(), "a shard still runs from b1"
        await inst.converge([b2], X86, set())
        assert not old.exists() and sorted(p.name for p in (tmp_path / "engines" / "llamacpp").iterdir()) == [
            "b2-cpu-x86_64"]


async def test_a_restarted_agent_reports_what_it_installed_from_its_first_pass(tmp_path: Path) -> None:
    with release_server(Release()) as rel:
        source = publish(rel, "b1", good("b1"))
        inst = Installer(context(tmp_path / "engines"))
        assert not inst.settled, "before its first pass the node has not looked: never probed, not none"
        await inst.converge([source], X86, set())
        await settle(inst)
        again = Installer(context(tmp_path / "engines"))
        await again.converge(again.load_wanted(), X86, set())
        (st,) = again.statuses()
        assert st.runs and again.tracks["llamacpp"].task is None and downloads(rel, "b1") == 1


async def test_an_engine_this_agent_does_not_know_is_reported_not_guessed(tmp_path: Path) -> None:
    inst = Installer(context(tmp_path / "engines"))
    await inst.converge([EngineSource(name="tgi", version="3.0")], X86, set())
    (st,) = inst.statuses()
    assert not st.runs and st.reason == "EngineInstallFailed" and "does not know the engine 'tgi'" in st.message


async def test_a_processor_with_no_build_is_out_for_that_engine_with_the_reason(tmp_path: Path) -> None:
    with release_server(Release()) as rel:
        source = publish(rel, "b1", good("b1"))
        inst = Installer(context(tmp_path / "engines"))
        await inst.converge([source], Hardware(arch="riscv64"), set())
        (st,) = inst.statuses()
        assert st.reason == "NoBuildForNode" and "no build for riscv64" in st.message
        assert downloads(rel, "b1") == 0
