"""A re-check in flight when the wanted build changes (a driver appears or goes) does not leave the old build
recorded as the one that runs."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.installs.installer import Installer
from llmgw.wire.engines import EngineSource, EngineVariant
from llmgw.wire.messages import Hardware
from tests.agent.installs.archives import sha256
from tests.agent.installs.fake_builds import fake_archive, fake_server_script
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import context
from tests.agent.installs.test_installer import X86, settle

GPU = Hardware(arch="x86_64", nvidia_driver="550.54")


async def test_a_recheck_in_flight_does_not_pin_the_old_variant_after_a_driver_appears(tmp_path: Path) -> None:
    slow = tmp_path / "slow"
    with release_server(Release()) as rel:
        cpu = fake_archive("b1", fake_server_script(slow_flag=slow))
        cuda = fake_archive("b1", fake_server_script())
        rel.files["cpu.tar.gz"], rel.files["cuda.tar.gz"] = cpu, cuda
        src = EngineSource(name="llamacpp", version="b1", variants=[
            EngineVariant(variant="cpu-x86_64", url=rel.url("cpu.tar.gz"), sha256=sha256(cpu)),
            EngineVariant(variant="cuda-x86_64", url=rel.url("cuda.tar.gz"), sha256=sha256(cuda))])
        inst = Installer(context(tmp_path / "engines"))
        await inst.converge([src], X86, set())
        await settle(inst)
        cpu_path = inst.statuses()[0].path
        assert "cpu-x86_64" in cpu_path
        slow.write_text("1")  # the re-check takes a second (vLLM's: 20 s)
        inst.ctx.clock.advance(601)  # type: ignore[attr-defined]
        await inst.converge([src], X86, set())  # the re-check starts
        used = {Path(cpu_path)}  # a shard serves from the cpu build meanwhile: it stays on disk
        await inst.converge([src], GPU, used)  # the driver is loaded now: the cuda build is wanted
        await settle(inst)
        slow.unlink()
        for _ in range(3):
            await inst.converge([src], GPU, used)
            await settle(inst)
        (st,) = inst.statuses()
        t = inst.tracks["llamacpp"]
        print(f"\nwanted {t.variant.variant if t.variant else None}; reported runs={st.runs} path={st.path}")
        assert "cuda-x86_64" in st.path, f"the cuda build is wanted; the node reports {st.path} as its llamacpp"
