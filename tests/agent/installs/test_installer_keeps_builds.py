"""The installer's promises: an old build is removed only when no shard uses it, a build is reported only when
installed and seen to run, a failure leaves the working build untouched, and the disk it uses is bounded."""

from __future__ import annotations

import time
from pathlib import Path

from llmgw.agent.installs.installer import Installer
from llmgw.wire.engines import EngineSource, EngineVariant
from llmgw.wire.messages import Hardware
from tests.agent.installs.archives import sha256
from tests.agent.installs.fake_builds import fake_archive, fake_server_script
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import context, name_of, publish
from tests.agent.installs.test_installer import X86, settle
from tests.harness import await_until


async def _installed(
    tmp_path: Path, rel: Release, version: str = "b1", **script: Path
) -> tuple[Installer, EngineSource]:
    src = publish(rel, version, fake_archive(version, fake_server_script(**script)))
    inst = Installer(context(tmp_path / "engines"))
    await inst.converge([src], X86, set())
    await settle(inst)
    (st,) = inst.statuses()
    assert st.runs, st
    return inst, src


async def test_a_failed_hardware_discovery_keeps_the_working_build(
    tmp_path: Path,
) -> None:
    """A failed hardware discovery before any succeeded (no arch, so no variant) deletes no installed build, and
    nothing is reported running from a deleted one."""
    with release_server(Release()) as rel:
        inst, src = await _installed(tmp_path, rel)
        path = Path(inst.statuses()[0].path)
        await inst.converge([src], Hardware(), set())  # what Agent.converge_engines passes when discovery failed
        (st,) = inst.statuses()
        print(f"\nreported: runs={st.runs} path={st.path} message={st.message!r}; exists={path.exists()}")
        assert path.exists(), "the working build was deleted by a failed hardware discovery"
        assert not (st.runs and not path.exists()), "reported running from a deleted directory"


async def test_a_driver_that_appears_leaves_no_deleted_build_reported_running(tmp_path: Path) -> None:
    """cuda and cpu variants offered, cpu installed (no driver yet); the driver loads: no build is reported running
    from a directory the installer deleted."""
    with release_server(Release()) as rel:
        data = fake_archive("b1", fake_server_script())
        rel.files[name_of("b1")] = data
        url = rel.url(name_of("b1"))
        src = EngineSource(name="llamacpp", version="b1", variants=[
            EngineVariant(variant="cpu-x86_64", url=url, sha256=sha256(data)),
            EngineVariant(variant="cuda-x86_64", url=url, sha256=sha256(data))])
        inst = Installer(context(tmp_path / "engines"))
        await inst.converge([src], X86, set())
        await settle(inst)
        path = Path(inst.statuses()[0].path)
        await inst.converge([src], Hardware(arch="x86_64", nvidia_driver="550.54"), set())
        (st,) = inst.statuses()
        print(f"\nreported: runs={st.runs} path={st.path}; exists={path.exists()}; task={inst.tracks['llamacpp'].task}")
        assert not (st.runs and not path.exists()), "reported running from a build the installer just deleted"


async def test_a_build_named_in_agent_yaml_inside_the_engines_dir_is_kept(tmp_path: Path) -> None:
    """A build agent.yaml pins ('used as it is') is kept, even inside the engines directory whose unused builds
    are removed."""
    with release_server(Release()) as rel:
        inst, _ = await _installed(tmp_path, rel)
        pinned = Path(inst.statuses()[0].path)  # agent.yaml: engines: {llamacpp: {path: <this>}}
        # what converge_engines passes once llamacpp is in cfg.engines: no source, and the named path in use
        await inst.converge([], X86, {pinned})
        assert pinned.exists(), f"{pinned}, named in agent.yaml ('used as it is'), was deleted"


async def test_a_restart_keeps_the_build_an_adopted_engine_still_runs_from(tmp_path: Path) -> None:
    """b1 serves a shard, the control plane moves to b2, the agent restarts and adopts the engine (hand-over): b1 is
    kept while the adopted engine runs from it."""
    with release_server(Release()) as rel:
        inst, _ = await _installed(tmp_path, rel, "b1")
        b1_bin_dir = Path(inst.statuses()[0].path).parent
        b2 = publish(rel, "b2", fake_archive("b2", fake_server_script()))
        await inst.converge([b2], X86, {b1_bin_dir})
        await settle(inst)
        await inst.converge([b2], X86, {b1_bin_dir})
        assert b1_bin_dir.exists()
        again = Installer(context(tmp_path / "engines"))  # the restarted agent
        # before adopting, the agent reads what the engines it found run from out of /proc/PID/cmdline
        await again.converge(again.load_wanted(), X86, {b1_bin_dir / "llama-server"})
        assert b1_bin_dir.exists(), "deleted while the adopted engine still runs from it"


async def test_a_slow_recheck_does_not_hold_up_the_agents_pass(tmp_path: Path) -> None:
    """A re-check of a build (probe timeouts of minutes) runs beside the agent's pass, so the heartbeat is not held up
    (node_lost_after is 60 s)."""
    slow = tmp_path / "slow"
    with release_server(Release()) as rel:
        inst, src = await _installed(tmp_path, rel, slow_flag=slow)
        slow.write_text("3")  # a loaded machine: the version check takes 3 s (vLLM's import: tens of seconds)
        inst.ctx.clock.advance(600)  # type: ignore[attr-defined]
        t0 = time.monotonic()
        await inst.converge([src], X86, set())
        took = time.monotonic() - t0
        await settle(inst)
        print(f"\nconverge (one agent pass) took {took:.1f}s")
        assert took < 1.0, f"the agent's pass (and its heartbeat) waited {took:.1f}s on an engine's --version"


async def test_leftovers_of_a_version_no_longer_wanted_are_removed(tmp_path: Path) -> None:
    """A cut download's .part, a verified archive whose build then failed, a staging dir of an agent killed
    mid-unpack: removed once their version is no longer wanted (a .part can be max_download, 16 GiB)."""
    root = tmp_path / "engines"
    with release_server(Release()) as rel:
        b1 = publish(rel, "b1", fake_archive("b1", fake_server_script()))
        rel.cut_after[name_of("b1")] = 100
        inst = Installer(context(root))
        await inst.converge([b1], X86, set())
        await settle(inst)
        assert inst.statuses()[0].reason == "DownloadFailed"
        (root / "llamacpp" / ".staging-b0-cpu-x86_64" / "llama-b0").mkdir(parents=True)  # agent killed mid-unpack
        (root / "llamacpp" / ".staging-b0-cpu-x86_64" / "llama-b0" / "big.so").write_bytes(b"\0" * 1000)
        b2 = publish(rel, "b2", fake_archive("b2", fake_server_script()))
        await inst.converge([b2], X86, set())
        await settle(inst)
        assert inst.statuses()[0].runs
        for _ in range(3):
            inst.ctx.clock.advance(700)  # type: ignore[attr-defined]
            await inst.converge([b2], X86, set())
            await settle(inst)
        left = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                      if ".part" in p.name or ".staging" in p.name)
        print("\nleft behind:", left)
        assert not left, f"kept forever: {left}"


def test_a_wanted_json_that_is_not_a_list_is_read_as_nothing_wanted(tmp_path: Path) -> None:
    """A wanted.json that is JSON but not a list (`null`) is read as nothing wanted, not raised out of every agent
    pass (which would stop the node's heartbeats)."""
    root = tmp_path / "engines"
    root.mkdir()
    (root / "wanted.json").write_text("null")
    inst = Installer(context(root))
    try:
        got = inst.load_wanted()
    except Exception as e:
        raise AssertionError(f"load_wanted raised {type(e).__name__}: {e}") from None
    assert got == []


async def test_two_sources_with_one_name_do_not_restart_each_other(tmp_path: Path) -> None:
    """Two sources on the wire with one engine name: the first is used, and a later pass does not cancel the install
    under way (the agent does not rely on the server's dedup)."""
    import threading

    with release_server(Release()) as rel:
        a = publish(rel, "b1", fake_archive("b1", fake_server_script(), pad=1 << 20))
        b = publish(rel, "b2", fake_archive("b2", fake_server_script(), pad=1 << 20))
        rel.hold[name_of("b1")] = threading.Event()
        rel.hold[name_of("b2")] = threading.Event()
        inst = Installer(context(tmp_path / "engines"))
        await inst.converge([a, b], X86, set())
        await await_until(lambda: rel.ranges, 10, "the first download reaching the server")
        first = inst.tracks["llamacpp"].task
        for _ in range(3):
            await inst.converge([a, b], X86, set())
        task = inst.tracks["llamacpp"].task
        assert task is first and first is not None and not first.cancelled(), \
            "a later pass cancelled the install under way: the two sources cancel each other"
        assert inst.tracks["llamacpp"].source == a
